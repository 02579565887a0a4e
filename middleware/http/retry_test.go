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
	"github.com/sluice-go/sluice/internal/retrytest"
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
			assert.True(t, at.Before(dl), "an attempt started past the deadline")
		}
		assert.True(t, time.Now().Before(dl.Add(30*time.Millisecond)))
	})
}

// A Retry-After is the least delay before the retry; one the deadline
// cannot wait for, or past MaxBackoff, is not waited for: the answer is
// returned at once.
func TestTransportRetryHonoursRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dep := &recorder{answer: func(n int, _ *http.Request) (*http.Response, error) {
			if n%2 == 1 {
				return answer(429, "Retry-After", "2"), nil
			}
			return answer(200), nil
		}}
		rt := retryTransport(t, dep, generous)
		resp, err := send(t, rt, context.Background(), http.MethodGet, nil)
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		require.Len(t, dep.at, 2)
		assert.GreaterOrEqual(t, dep.at[1].Sub(dep.at[0]), 2*time.Second)

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		resp, err = send(t, rt, ctx, http.MethodGet, nil)
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
