package sluicehttp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/retrytest"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
	"github.com/sluice-go/sluice/ratelimit"
)

// recorder is a dependency that answers each call with answer, and notes
// when each came and what body it carried.
type recorder struct {
	answer func(n int, r *http.Request) (*http.Response, error)
	mu     sync.Mutex
	at     []time.Time
	bodies []string
}

func (d *recorder) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		_ = r.Body.Close()
	}
	d.mu.Lock()
	d.at = append(d.at, time.Now())
	d.bodies = append(d.bodies, string(body))
	n := len(d.at)
	d.mu.Unlock()
	return d.answer(n, r)
}

func (d *recorder) calls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.at)
}

func answer(status int, header ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("payload"))}
}

// failing answers 503 every time; failingUntil answers 503 to the first n-1
// calls, then 200.
func failing(int, *http.Request) (*http.Response, error) { return answer(503), nil }

func failingUntil(n int) func(int, *http.Request) (*http.Response, error) {
	return func(i int, _ *http.Request) (*http.Response, error) {
		if i < n {
			return answer(503), nil
		}
		return answer(200), nil
	}
}

// retryTransport is a Transport whose every host's Guard retries as r says,
// with opts, on a clock of the bubble.
func retryTransport(t *testing.T, dep http.RoundTripper, r sluice.Retry, opts ...sluice.Option) *RoundTripper {
	t.Helper()
	rt, err := Transport(dep, func(string) (*sluice.Guard, error) {
		return sluice.New(append([]sluice.Option{sluice.WithRetry(r)}, opts...)...)
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	return rt
}

func send(t *testing.T, rt http.RoundTripper, ctx context.Context, method string, body io.Reader, header ...string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, "http://dep.test/x", body)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := rt.RoundTrip(req)
	if resp != nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	return resp, err
}

var generous = sluice.Retry{Attempts: 3, Backoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second, Budget: 1, MinPerSecond: 100}

func TestTransportRetriesWithinItsBackoffBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dep := &recorder{answer: failingUntil(3)}
		rt := retryTransport(t, dep, generous)
		var gaps [2][]time.Duration
		for range 100 {
			dep.at = nil
			dep.answer = failingUntil(3)
			resp, err := send(t, rt, context.Background(), http.MethodGet, nil)
			require.NoError(t, err)
			require.Equal(t, 200, resp.StatusCode)
			require.Len(t, dep.at, 3)
			gaps[0] = append(gaps[0], dep.at[1].Sub(dep.at[0]))
			gaps[1] = append(gaps[1], dep.at[2].Sub(dep.at[1]))
		}
		retrytest.Spread(t, gaps[:], []time.Duration{100 * time.Millisecond, 200 * time.Millisecond})
		g, ok := rt.Guard("dep.test")
		require.True(t, ok)
		assert.Equal(t, uint64(300), g.Stats().Attempts)
		assert.Equal(t, uint64(200), g.Stats().Retries)
	})
}

func TestTransportRetryStopsAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dep := &recorder{answer: func(int, *http.Request) (*http.Response, error) {
			time.Sleep(30 * time.Millisecond)
			return answer(503), nil
		}}
		rt := retryTransport(t, dep, sluice.Retry{Attempts: 50, Backoff: 20 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Budget: 1, MinPerSecond: 1000})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		dl, _ := ctx.Deadline()
		resp, err := send(t, rt, ctx, http.MethodGet, nil)
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode, "the last failure is the caller's")
		assert.GreaterOrEqual(t, dep.calls(), 4)
		for _, at := range dep.at {
			assert.False(t, at.Add(30*time.Millisecond).After(dl), "an attempt started %v before the deadline, too late to end", dl.Sub(at))
		}
		assert.True(t, time.Now().Before(dl), "the call waited for a retry it could not make")
	})
}

// A Retry-After is the least delay before the retry; one the deadline
// cannot wait for, or past MaxBackoff, is not waited for: the answer is
// returned at once.
func TestTransportRetryHonoursRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dep, rt, gap := retriedAfter(t, 429, func() string { return "2" })
		assert.GreaterOrEqual(t, gap, 2*time.Second)

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		resp, err := send(t, rt, ctx, http.MethodGet, nil)
		require.NoError(t, err)
		assert.Equal(t, 429, resp.StatusCode)
		assert.Equal(t, 3, dep.calls(), "retried though the deadline came before the Retry-After")
		assert.Zero(t, time.Since(start), "waited for a retry it could not make")
	})
}

// HTTP keeps Retry-After: a sluice server's rate-limited answer is retried
// by a sluice client after its Retry-After when the deadline allows it, and
// returned at once when it does not.
func TestTransportRetriesASluiceServersRejectionAfterItsDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limit, err := ratelimit.NewTokenBucket(ratelimit.Rate{Count: 1, Period: 2 * time.Second}, 1)
		require.NoError(t, err)
		server, err := sluice.New(sluice.With(limit))
		require.NoError(t, err)
		mw, err := Middleware(WithGuard(server))
		require.NoError(t, err)
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
		served := &recorder{answer: func(_ int, r *http.Request) (*http.Response, error) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w.Result(), nil
		}}
		rt := retryTransport(t, served, generous)

		resp, err := send(t, rt, context.Background(), http.MethodGet, nil)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		start := time.Now()
		resp, err = send(t, rt, context.Background(), http.MethodGet, nil)
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode, "the rate-limited call was not retried")
		assert.GreaterOrEqual(t, time.Since(start), 2*time.Second, "retried before the Retry-After")
		assert.Equal(t, 3, served.calls())

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err = send(t, rt, ctx, http.MethodGet, nil)
		require.NoError(t, err)
		assert.Equal(t, 429, resp.StatusCode)
		assert.Equal(t, 4, served.calls(), "retried past the deadline")
	})
}

// Under 64 callers against a dependency that always fails, retries add at
// most the budget's share of the calls, plus the floor for the time passed
// and the 10 retries the budget may save.
func TestTransportRetryBudgetHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dep := &recorder{answer: func(int, *http.Request) (*http.Response, error) {
			time.Sleep(5 * time.Millisecond)
			return answer(503), nil
		}}
		rt := retryTransport(t, dep, sluice.Retry{Attempts: 3, Backoff: time.Millisecond, MaxBackoff: time.Millisecond})
		retrytest.Storm(t, 40, 0.1, 1, func() {
			resp, err := send(t, rt, context.Background(), http.MethodGet, nil)
			assert.NoError(t, err)
			assert.Equal(t, 503, resp.StatusCode)
		}, dep.calls)
	})
}

func TestTransportRetriesOnlyWhatIsSafeToRepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct {
			method string
			body   io.Reader
			header []string
			tries  int
		}{
			{http.MethodGet, nil, nil, 3},
			{http.MethodHead, nil, nil, 3},
			{http.MethodOptions, nil, nil, 3},
			{http.MethodDelete, nil, nil, 3},
			{http.MethodPut, strings.NewReader("v"), nil, 3},
			{http.MethodPost, strings.NewReader("v"), nil, 1},
			{http.MethodPatch, strings.NewReader("v"), nil, 1},
			{http.MethodPost, strings.NewReader("v"), []string{"Idempotency-Key", "k-1"}, 3},
			// A body that cannot be had again is sent once.
			{http.MethodPut, io.NopCloser(strings.NewReader("v")), nil, 1},
		} {
			dep := &recorder{answer: failing}
			rt := retryTransport(t, dep, generous)
			resp, err := send(t, rt, context.Background(), c.method, c.body, c.header...)
			require.NoError(t, err)
			assert.Equal(t, 503, resp.StatusCode)
			assert.Equal(t, c.tries, dep.calls(), "%s %v", c.method, c.header)
		}
	})
}

func TestTransportReplaysTheBodyByteForByte(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		payload := bytes.Repeat([]byte("sluice\x00\xff"), 4096)
		dep := &recorder{answer: failingUntil(3)}
		rt := retryTransport(t, dep, generous)
		resp, err := send(t, rt, context.Background(), http.MethodPut, bytes.NewReader(payload))
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		require.Len(t, dep.bodies, 3)
		for i, b := range dep.bodies {
			assert.Equal(t, string(payload), b, "attempt %d", i+1)
		}
	})
}

// A rejection by the client's own breaker is never retried; nor is a call
// whose caller gave up, nor a cancelled transport error.
func TestTransportNeverRetriesItsOwnRejectionOrACancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := breaker.New("dep", breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(time.Minute))
		require.NoError(t, err)
		dep := &recorder{answer: failing}
		rt := retryTransport(t, dep, generous, sluice.With(b))
		_, err = send(t, rt, context.Background(), http.MethodGet, nil)
		assert.ErrorIs(t, err, sluice.ErrCircuitOpen, "the retry met the open breaker")
		assert.Equal(t, 1, dep.calls())

		ctx, cancel := context.WithCancel(context.Background())
		dep = &recorder{answer: func(int, *http.Request) (*http.Response, error) {
			cancel()
			return nil, context.Canceled
		}}
		rt = retryTransport(t, dep, generous)
		_, err = send(t, rt, ctx, http.MethodGet, nil)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 1, dep.calls())

		// A connection error is a failure, and retried.
		dep = &recorder{answer: func(n int, _ *http.Request) (*http.Response, error) {
			if n == 1 {
				return nil, errors.New("connection reset")
			}
			return answer(200), nil
		}}
		rt = retryTransport(t, dep, generous)
		resp, err := send(t, rt, context.Background(), http.MethodGet, nil)
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, 2, dep.calls())
	})
}

// retriedAfter sends a GET whose first answer is status with the
// Retry-After retryAfter gives, and whose second is 200; it returns the
// dependency, the Transport, and the wait between the two attempts.
func retriedAfter(t *testing.T, status int, retryAfter func() string) (*recorder, *RoundTripper, time.Duration) {
	t.Helper()
	dep := &recorder{answer: func(n int, _ *http.Request) (*http.Response, error) {
		if n%2 == 1 {
			return answer(status, "Retry-After", retryAfter()), nil
		}
		return answer(200), nil
	}}
	rt := retryTransport(t, dep, generous)
	resp, err := send(t, rt, context.Background(), http.MethodGet, nil)
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	require.Len(t, dep.at, 2)
	return dep, rt, dep.at[1].Sub(dep.at[0])
}

// Retry-After as an HTTP-date is a least delay as delay-seconds is.
func TestTransportRetryHonoursARetryAfterDate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, gap := retriedAfter(t, 503, func() string {
			return time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
		})
		// The date has whole seconds: the wait is at least 2s, at most 3s
		// and the jitter added to it (under the first bound, Backoff).
		assert.GreaterOrEqual(t, gap, 2*time.Second)
		assert.LessOrEqual(t, gap, 3*time.Second+generous.Backoff)
	})
}

// countedBody is a response body that counts how much of it was read and
// whether it was closed.
type countedBody struct {
	io.Reader
	read   int
	closed bool
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	b.read += n
	return n, err
}

func (b *countedBody) Close() error { b.closed = true; return nil }

// The answer of a failed attempt is read (so its connection is reused)
// and closed before the retry; the caller's answer is left to the caller.
func TestTransportClosesTheAnswersOfFailedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var bodies []*countedBody
		dep := &recorder{answer: func(n int, _ *http.Request) (*http.Response, error) {
			b := &countedBody{Reader: strings.NewReader("unavailable")}
			bodies = append(bodies, b)
			status := 503
			if n == 3 {
				status = 200
			}
			return &http.Response{StatusCode: status, Header: http.Header{}, Body: b}, nil
		}}
		rt := retryTransport(t, dep, generous)
		req, err := http.NewRequest(http.MethodGet, "http://dep.test/x", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		require.Len(t, bodies, 3)
		for i, b := range bodies[:2] {
			assert.True(t, b.closed, "the answer of attempt %d was left open", i+1)
			assert.Equal(t, len("unavailable"), b.read, "the answer of attempt %d was not drained", i+1)
		}
		assert.False(t, bodies[2].closed, "the caller's answer was closed")
		require.NoError(t, resp.Body.Close())
		assert.True(t, bodies[2].closed)
	})
}

// A failed attempt's request body, replayed through GetBody, is closed on
// every path: sent (by the RoundTripper beneath), and not sent because the
// Guard's own limiter rejected the retry.
func TestTransportClosesTheReplayedBodyWhenTheRetryIsRejected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limit, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1)
		require.NoError(t, err)
		dep := &recorder{answer: failing}
		rt := retryTransport(t, dep, generous, sluice.With(limit))
		var made []*countedBody
		req, err := http.NewRequest(http.MethodPut, "http://dep.test/x", nil)
		require.NoError(t, err)
		req.GetBody = func() (io.ReadCloser, error) {
			b := &countedBody{Reader: strings.NewReader("v")}
			made = append(made, b)
			return b, nil
		}
		req.Body, _ = req.GetBody()
		_, err = rt.RoundTrip(req)
		assert.ErrorIs(t, err, sluice.ErrRateLimited)
		assert.Equal(t, 1, dep.calls())
		require.Len(t, made, 2)
		for i, b := range made {
			assert.True(t, b.closed, "body %d left open", i+1)
		}
	})
}

// A transport error is retried, and counted, as the Guard's Classifier
// says: one it ignores is neither retried nor a failure of its breaker.
func TestTransportRetriesTransportErrorsByTheGuardsClassifier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		count := testpolicy.NewCounter()
		dep := &recorder{answer: func(int, *http.Request) (*http.Response, error) {
			return nil, errors.New("connection reset")
		}}
		rt := retryTransport(t, dep, generous, sluice.With(count),
			sluice.WithClassifier(func(error) sluice.Outcome { return sluice.Ignored }))
		_, err := send(t, rt, context.Background(), http.MethodGet, nil)
		require.Error(t, err)
		assert.Equal(t, 1, dep.calls(), "not retried")
		assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, count.Outcomes())
	})
}

// A peer's Retry-After is the least wait before a retry, however long:
// only the Retry's MaxBackoff bounds it.
func TestTransportHonoursARetryAfterOfHours(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dep := &recorder{answer: func(n int, _ *http.Request) (*http.Response, error) {
			if n == 1 {
				return answer(503, "Retry-After", "7200"), nil
			}
			return answer(200), nil
		}}
		rt := retryTransport(t, dep, sluice.Retry{Attempts: 2, Backoff: time.Millisecond, MaxBackoff: 3 * time.Hour, Budget: 1})
		resp, err := send(t, rt, context.Background(), http.MethodGet, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Len(t, dep.at, 2)
		assert.GreaterOrEqual(t, dep.at[1].Sub(dep.at[0]), 2*time.Hour)
	})
}

// A Retry-After holds the host's breaker open for the whole delay from
// when the answer came, however long the call took to get it.
func TestTransportRetryAfterHoldsFromTheAnswer(t *testing.T) {
	for _, took := range []time.Duration{0, 3 * time.Second} {
		t.Run("answer took "+took.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dep := &recorder{answer: func(int, *http.Request) (*http.Response, error) {
					time.Sleep(took)
					return answer(503, "Retry-After", "2"), nil
				}}
				rt, err := Transport(dep, func(string) (*sluice.Guard, error) {
					b, err := breaker.New("dep", breaker.WithConsecutiveFailures(100))
					if err != nil {
						return nil, err
					}
					return sluice.New(sluice.With(b), sluice.WithClock(monoclock.New()))
				})
				require.NoError(t, err)
				defer rt.Close()
				_, err = send(t, rt, context.Background(), http.MethodGet, nil)
				require.NoError(t, err)
				time.Sleep(time.Second)
				_, err = send(t, rt, context.Background(), http.MethodGet, nil)
				assert.ErrorIs(t, err, sluice.ErrCircuitOpen, "held open 2 s from the answer")
				assert.Equal(t, 1, dep.calls())
			})
		})
	}
}

// An attempt that the Guard's deadline ended is classified as its end
// would be: as a timeout, which a Classifier may count apart.
func TestTransportClassifiesAnAttemptPastTheDeadlineAsATimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		count := testpolicy.NewCounter()
		onlyTimeouts := func(err error) sluice.Outcome {
			if errors.Is(err, sluice.ErrTimeout) {
				return sluice.Failure
			}
			return sluice.Ignored
		}
		dep := &recorder{answer: func(_ int, r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		}}
		rt := retryTransport(t, dep, sluice.Retry{Attempts: 2, Backoff: time.Millisecond, MaxBackoff: time.Second, Budget: 1, MinPerSecond: 100},
			sluice.With(count), sluice.WithTimeout(50*time.Millisecond), sluice.WithClassifier(onlyTimeouts))
		_, err := send(t, rt, context.Background(), http.MethodGet, nil)
		require.Error(t, err)
		assert.Equal(t, 2, dep.calls(), "the timeout is a failure: retried")
		assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 2}, count.Outcomes())
	})
}

// A Retry-After too large for a Duration does not overflow the deadline's
// check: the retry it asks for would outlast the deadline, and the caller
// gets the answer at once.
func TestTransportRetryAfterPastAnyDurationEndsTheRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dep := &recorder{answer: func(int, *http.Request) (*http.Response, error) {
			time.Sleep(time.Millisecond)
			return answer(503, "Retry-After", "99999999999999999999"), nil
		}}
		rt := retryTransport(t, dep, sluice.Retry{Attempts: 2, Backoff: time.Millisecond, MaxBackoff: 1<<63 - 1, Budget: 1, MinPerSecond: 100})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		resp, err := send(t, rt, ctx, http.MethodGet, nil)
		require.NoError(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Less(t, time.Since(start), time.Second)
		assert.Equal(t, 1, dep.calls())
	})
}

// A peer's Retry-After is the least delay before a retry, and the jitter
// is added to it: the clients a server told one instant (a sluice rate
// limit tells every caller it rejects the same) do not all come back at
// it together.
func TestTransportRetryAfterKeepsTheJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := retryTransport(t, &recorder{answer: failing}, generous)
		seen := map[time.Duration]int{}
		for range 50 {
			dep := &recorder{answer: func(n int, _ *http.Request) (*http.Response, error) {
				if n == 1 {
					return answer(503, "Retry-After", "1"), nil
				}
				return answer(200), nil
			}}
			rt.next = dep
			resp, err := send(t, rt, context.Background(), http.MethodGet, nil)
			if err != nil || resp.StatusCode != 200 || len(dep.at) != 2 {
				t.Fatalf("resp %v, err %v, %d attempts", resp, err, len(dep.at))
			}
			gap := dep.at[1].Sub(dep.at[0])
			if gap < time.Second {
				t.Fatalf("retried %v after a Retry-After of 1s", gap)
			}
			seen[gap]++
		}
		if len(seen) == 1 {
			t.Errorf("50 retries after Retry-After: 1 all waited exactly %v: no jitter at all (%v)", time.Second, seen)
		}
	})
}

// "The caller gets the last attempt's answer": also when the request's
// body cannot be had again for the retry (GetBody fails: a file that cannot
// be reopened), and no retry is counted that was never sent.
func TestTransportReplayFailureKeepsTheLastAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dep := &recorder{answer: failing}
		rt := retryTransport(t, dep, generous)
		req, err := http.NewRequest(http.MethodPut, "http://dep.test/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		gets := 0
		req.GetBody = func() (io.ReadCloser, error) {
			gets++
			if gets > 1 {
				return nil, errors.New("reopen: file is gone")
			}
			return io.NopCloser(strings.NewReader("v")), nil
		}
		req.Body, _ = req.GetBody()
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Errorf("RoundTrip: %v; want the last attempt's answer, 503", err)
		} else {
			if resp.StatusCode != 503 {
				t.Errorf("status %d, want 503", resp.StatusCode)
			}
			_ = resp.Body.Close()
		}
		g, _ := rt.Guard("dep.test")
		if s := g.Stats(); s.Retries != 0 || dep.calls() != 1 {
			t.Errorf("%d attempt(s) sent, Stats.Retries %d: a retry counted that was never sent", dep.calls(), s.Retries)
		}
	})
}
