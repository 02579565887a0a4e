package sluicehttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
	"github.com/sluice-go/sluice/ratelimit"
)

// fakeDependency answers every call with the status and header it is set to.
type fakeDependency struct {
	status int
	header http.Header
	calls  atomic.Int32
	err    error
}

func (f *fakeDependency) RoundTrip(r *http.Request) (*http.Response, error) {
	f.calls.Add(1)
	if r.Body != nil {
		_ = r.Body.Close()
	}
	if f.err != nil {
		return nil, f.err
	}
	h := f.header.Clone()
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{StatusCode: f.status, Header: h, Body: io.NopCloser(strings.NewReader("payload")), Request: r}, nil
}

// trackedBody records whether it was closed.
type trackedBody struct {
	io.Reader
	closed bool
}

func (b *trackedBody) Close() error { b.closed = true; return nil }

func newTransport(t *testing.T, dep http.RoundTripper, clock sluice.Clock, opts ...TransportOption) (*RoundTripper, map[string]*breaker.Breaker) {
	t.Helper()
	breakers := map[string]*breaker.Breaker{}
	rt, err := Transport(dep, func(host string) (*sluice.Guard, error) {
		if host == "unguarded.test" {
			return nil, nil
		}
		if host == "broken.test" {
			return nil, errors.New("no config")
		}
		b, err := breaker.New(host, breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(10*time.Second))
		if err != nil {
			return nil, err
		}
		breakers[host] = b
		return sluice.New(sluice.With(b), sluice.WithClock(clock))
	}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	return rt, breakers
}

func get(t *testing.T, rt http.RoundTripper, url string, body io.ReadCloser) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, nil)
	require.NoError(t, err)
	req.Body = body
	return rt.RoundTrip(req)
}

func TestTransportBreakerPerHostByStatus(t *testing.T) {
	clock := sluice.NewManualClock(0)
	dep := &fakeDependency{status: http.StatusNotFound}
	rt, _ := newTransport(t, dep, clock)
	for range 5 {
		resp, err := get(t, rt, "http://a.test/x", nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
	}
	dep.status = http.StatusInternalServerError
	for range 2 {
		resp, err := get(t, rt, "http://a.test/x", nil)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	calls := dep.calls.Load()
	body := &trackedBody{Reader: strings.NewReader("request")}
	resp, err := get(t, rt, "http://a.test/x", body)
	assert.Nil(t, resp)
	rej, ok := sluice.RejectionOf(err)
	require.True(t, ok, err)
	assert.ErrorIs(t, err, sluice.ErrCircuitOpen)
	assert.Equal(t, 10*time.Second, rej.RetryAfter)
	assert.True(t, body.closed, "a rejected call's request body is closed")
	assert.Equal(t, calls, dep.calls.Load(), "a rejected call is not sent")

	dep.status = http.StatusOK
	resp, err = get(t, rt, "http://b.test/x", nil)
	require.NoError(t, err, "another host has its own breaker")
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, 2, rt.Hosts())
}

func TestTransportOutcomeWaitsForTheBody(t *testing.T) {
	clock := sluice.NewManualClock(0)
	dep := &fakeDependency{status: http.StatusBadGateway}
	rt, breakers := newTransport(t, dep, clock)
	r1, err := get(t, rt, "http://a.test/", nil)
	require.NoError(t, err)
	r2, err := get(t, rt, "http://a.test/", nil)
	require.NoError(t, err)
	assert.Equal(t, breaker.StateClosed, breakers["a.test"].State(), "nothing counted before the bodies end")
	_, _ = io.ReadAll(r1.Body)
	require.NoError(t, r2.Body.Close())
	require.NoError(t, r1.Body.Close())
	assert.Equal(t, breaker.StateOpen, breakers["a.test"].State())
}

func TestTransportHonoursRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		name   string
		status int
		value  string
		want   time.Duration
	}{
		{"seconds on 503", http.StatusServiceUnavailable, "120", 120 * time.Second},
		{"seconds on 429", http.StatusTooManyRequests, "30", 30 * time.Second},
		{"capped", http.StatusTooManyRequests, "999999", 5 * time.Minute},
		{"capped beyond int64", http.StatusServiceUnavailable, "99999999999999999999", 5 * time.Minute},
		{"capped with leading zeros", http.StatusServiceUnavailable, "000000000000000000000000060", time.Minute},
		{"http date", http.StatusServiceUnavailable, "Sun, 22 Nov 2026 05:01:40 GMT", 100 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluice.NewManualClock(time.Hour)
			dep := &fakeDependency{status: tt.status, header: http.Header{"Retry-After": {tt.value}}}
			rt, _ := newTransport(t, dep, clock, WithMaxRetryAfter(5*time.Minute))
			rt.cfg.wallNow = func() time.Time { return time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC) }
			resp, err := get(t, rt, "http://a.test/", nil)
			require.NoError(t, err)
			assert.Equal(t, tt.status, resp.StatusCode, "the dependency's answer is returned")
			require.NoError(t, resp.Body.Close())
			_, err = get(t, rt, "http://a.test/", nil)
			rej, ok := sluice.RejectionOf(err)
			require.True(t, ok, err)
			assert.Equal(t, tt.want, rej.RetryAfter)
		})
	}
}

func TestTransportIgnoresUselessRetryAfter(t *testing.T) {
	for _, v := range []string{"", "0", "-5", "+5", "1.5", "-99999999999999999999", "soon", "Sun, 22 Nov 2026 04:00:00 GMT"} {
		clock := sluice.NewManualClock(0)
		dep := &fakeDependency{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {v}}}
		rt, breakers := newTransport(t, dep, clock)
		rt.cfg.wallNow = func() time.Time { return time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC) }
		for range 3 {
			resp, err := get(t, rt, "http://a.test/", nil)
			require.NoError(t, err, v)
			require.NoError(t, resp.Body.Close())
		}
		assert.Equal(t, breaker.StateClosed, breakers["a.test"].State(), v)
	}
}

// WithMaxRetryAfter(0) turns the holding off: a dependency's Retry-After
// (one tenant's quota, say) leaves the host's breaker closed.
func TestTransportWithoutRetryAfterHolding(t *testing.T) {
	clock := sluice.NewManualClock(0)
	dep := &fakeDependency{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {"30"}}}
	rt, breakers := newTransport(t, dep, clock, WithMaxRetryAfter(0))
	for range 3 {
		resp, err := get(t, rt, "http://a.test/", nil)
		require.NoError(t, err)
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		require.NoError(t, resp.Body.Close())
	}
	assert.Equal(t, breaker.StateClosed, breakers["a.test"].State())
	assert.Equal(t, int32(3), dep.calls.Load())
}

func TestTransportErrorsAndUnguardedHosts(t *testing.T) {
	clock := sluice.NewManualClock(0)
	dep := &fakeDependency{status: 200}
	rt, breakers := newTransport(t, dep, clock)

	body := &trackedBody{Reader: strings.NewReader("x")}
	_, err := get(t, rt, "http://broken.test/", body)
	assert.ErrorContains(t, err, "no config")
	assert.True(t, body.closed)
	assert.Zero(t, dep.calls.Load())

	resp, err := get(t, rt, "http://unguarded.test/", nil)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	dep.err = errors.New("connection refused")
	for range 2 {
		_, err = get(t, rt, "http://a.test/", nil)
		assert.ErrorContains(t, err, "refused")
	}
	assert.Equal(t, breaker.StateOpen, breakers["a.test"].State())
}

func TestTransportBoundsHosts(t *testing.T) {
	clock := sluice.NewManualClock(0)
	rt, _ := newTransport(t, &fakeDependency{status: 200}, clock, WithMaxHosts(2))
	for _, h := range []string{"a.test", "b.test", "c.test", "a.test"} {
		resp, err := get(t, rt, "http://"+h+"/", nil)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	assert.Equal(t, 2, rt.Hosts())
}

// closeCounter is a policy that admits everything and counts its Closes.
type closeCounter struct{ closed *atomic.Int32 }

func (closeCounter) Name() string { return "test/close" }
func (closeCounter) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1}, nil
}
func (closeCounter) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (closeCounter) Needs() sluice.Needs                                              { return 0 }
func (c closeCounter) Close() error                                                   { c.closed.Add(1); return nil }

// A host whose call is in flight (its body still open) keeps its Guard past
// WithMaxHosts: were it dropped, its next call would get a second Guard, and
// a bulkhead of 1 would admit two calls at once. The table holds more hosts
// meanwhile, and drops the extra ones, closing their Guards, as their last
// calls end.
func TestTransportKeepsTheGuardOfAHostWithCallsInFlight(t *testing.T) {
	var made, closed atomic.Int32
	rt, err := Transport(&fakeDependency{status: http.StatusOK}, func(string) (*sluice.Guard, error) {
		made.Add(1)
		b, err := adaptive.NewBulkhead(1)
		if err != nil {
			return nil, err
		}
		return sluice.New(sluice.With(b, closeCounter{&closed}))
	}, WithMaxHosts(1))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })

	inFlight, err := get(t, rt, "http://a.test/", nil) // its body stays open
	require.NoError(t, err)
	other, err := get(t, rt, "http://b.test/", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, rt.Hosts(), "both hosts have a call in flight")
	require.NoError(t, other.Body.Close())
	assert.Equal(t, 1, rt.Hosts(), "b.test is dropped with its last call")
	assert.EqualValues(t, 1, closed.Load(), "b.test's Guard is closed")

	_, err = get(t, rt, "http://a.test/", nil)
	require.ErrorIs(t, err, sluice.ErrConcurrencyLimited, "a.test's bulkhead of 1 holds its call in flight")
	assert.EqualValues(t, 2, made.Load(), "a.test's Guard is made once")

	require.NoError(t, inFlight.Body.Close())
	again, err := get(t, rt, "http://a.test/", nil)
	require.NoError(t, err, "a.test's call ended")
	require.NoError(t, again.Body.Close())
	assert.EqualValues(t, 2, made.Load())
	assert.Equal(t, 1, rt.Hosts())
	assert.EqualValues(t, 1, closed.Load(), "a.test's Guard is kept")
}

// panickyDependency panics on its first call, and answers 200 after.
type panickyDependency struct{ calls atomic.Int32 }

func (p *panickyDependency) RoundTrip(r *http.Request) (*http.Response, error) {
	if p.calls.Add(1) == 1 {
		panic("transport bug")
	}
	return (&fakeDependency{status: http.StatusOK}).RoundTrip(r)
}

// A RoundTripper beneath that panics fails its call, and the call ends: it
// holds neither its bulkhead slot nor its host.
func TestTransportPanicBeneathEndsTheCall(t *testing.T) {
	rt, err := Transport(&panickyDependency{}, func(string) (*sluice.Guard, error) {
		b, err := adaptive.NewBulkhead(1)
		if err != nil {
			return nil, err
		}
		return sluice.New(sluice.With(b))
	}, WithMaxHosts(1))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	assert.PanicsWithValue(t, "transport bug", func() { _, _ = get(t, rt, "http://a.test/", nil) })
	resp, err := get(t, rt, "http://a.test/", nil)
	require.NoError(t, err, "the slot is free again")
	require.NoError(t, resp.Body.Close())
	resp, err = get(t, rt, "http://b.test/", nil)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, 1, rt.Hosts(), "a.test, without calls, was dropped")
}

// Calls on many hosts past WithMaxHosts, their bodies closed or read to the
// end in any order: once every call has ended, the table is back within its
// bound, and every Guard made is closed once, when dropped or on Close.
func TestTransportDropsEveryIdleHostOnce(t *testing.T) {
	var made, closed atomic.Int32
	rt, err := Transport(&fakeDependency{status: http.StatusOK}, func(string) (*sluice.Guard, error) {
		made.Add(1)
		return sluice.New(sluice.With(closeCounter{&closed}))
	}, WithMaxHosts(3))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			var open []*http.Response
			for range 200 {
				resp, err := get(t, rt, fmt.Sprintf("http://h%d.test/", r.IntN(10)), nil)
				if !assert.NoError(t, err) {
					return
				}
				open = append(open, resp)
				if r.IntN(3) == 0 {
					for _, o := range open {
						_ = o.Body.Close()
					}
					open = open[:0]
				}
			}
			for _, o := range open {
				_, _ = io.ReadAll(o.Body) // the end of the body ends the call too
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, rt.Hosts(), 3)
	assert.Equal(t, made.Load()-int32(rt.Hosts()), closed.Load(), "the dropped hosts' Guards are closed")
	require.NoError(t, rt.Close())
	assert.Equal(t, made.Load(), closed.Load())
}

// A call waiting for its host's Guard, while another call runs a slow
// guards function, ends with its own context: it returns the context's error
// and closes its request's body. It holds nothing of the host afterwards.
func TestTransportCallWaitingForItsGuardEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		rt, err := Transport(&fakeDependency{status: http.StatusOK}, func(host string) (*sluice.Guard, error) {
			if host == "a.test" {
				<-gate // dialling Redis, reading config
			}
			return sluice.New()
		}, WithMaxHosts(1))
		require.NoError(t, err)
		defer rt.Close()
		first := make(chan error, 1)
		go func() {
			resp, err := get(t, rt, "http://a.test/", nil)
			if err == nil {
				err = resp.Body.Close()
			}
			first <- err
		}()
		synctest.Wait() // the first call is in the factory

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		body := &trackedBody{Reader: strings.NewReader("payload")}
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "http://a.test/", body)
		waited := make(chan error, 1)
		go func() {
			_, err := rt.RoundTrip(req)
			waited <- err
		}()
		time.Sleep(2 * time.Second) // past the waiting call's deadline
		synctest.Wait()
		select {
		case err := <-waited:
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.True(t, body.closed, "the request's body is closed")
		default:
			t.Fatal("the call still waits for its Guard past its deadline")
		}

		close(gate)
		require.NoError(t, <-first)
		assert.Equal(t, 1, rt.Hosts())
		resp, err := get(t, rt, "http://b.test/", nil)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, 1, rt.Hosts(), "a.test has no call left: b.test takes its place")
	})
}

func TestTransportValidates(t *testing.T) {
	_, err := Transport(nil, nil)
	assert.Error(t, err)
	f := func(string) (*sluice.Guard, error) { return nil, nil }
	for _, o := range []TransportOption{WithMaxHosts(0), WithHostFunc(nil), WithResponseClassifier(nil), WithMaxRetryAfter(-time.Second)} {
		_, err = Transport(nil, f, o)
		assert.Error(t, err)
	}
	// Given twice, the second would drop the first in silence.
	_, err = Transport(nil, f, WithMaxHosts(8), WithMaxHosts(16))
	assert.ErrorContains(t, err, "WithMaxHosts given twice")
}

func TestTransportWithClient(t *testing.T) {
	clock := sluice.NewManualClock(0)
	rt, _ := newTransport(t, &fakeDependency{status: 200}, clock,
		WithHostFunc(func(r *http.Request) string { return "svc:" + r.URL.Hostname() }),
		WithResponseClassifier(func(resp *http.Response, err error) sluice.Outcome {
			if err != nil || resp.StatusCode != 200 {
				return sluice.Failure
			}
			return sluice.Success
		}))
	client := &http.Client{Transport: rt}
	resp, err := client.Get("http://a.test/")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, "payload", string(b))
	assert.Equal(t, 1, rt.Hosts())
}

// failingBody fails its reads with err.
type failingBody struct{ err error }

func (b failingBody) Read([]byte) (int, error) { return 0, b.err }
func (failingBody) Close() error               { return nil }

// bodyDependency answers 200 with a body that fails with err.
type bodyDependency struct{ err error }

func (d bodyDependency) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: failingBody(d), Request: r}, nil
}

func TestTransportBodyReadErrors(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want sluice.Outcome
	}{
		{errors.New("connection reset"), sluice.Failure},
		{context.Canceled, sluice.Ignored},
		{io.EOF, sluice.Success},
	} {
		c := testpolicy.NewCounter()
		rt, err := Transport(bodyDependency{tt.err}, func(string) (*sluice.Guard, error) {
			return sluice.New(sluice.With(c))
		})
		require.NoError(t, err)
		resp, err := get(t, rt, "http://a.test/", nil)
		require.NoError(t, err)
		_, _ = io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, map[sluice.Outcome]int{tt.want: 1}, c.Outcomes(), tt.err)
		require.NoError(t, rt.Close())
	}
}

// idleCloser counts CloseIdleConnections calls.
type idleCloser struct {
	fakeDependency
	closed int
}

func (d *idleCloser) CloseIdleConnections() { d.closed++ }

func TestTransportCloseIdleConnections(t *testing.T) {
	dep := &idleCloser{}
	rt, err := Transport(dep, func(string) (*sluice.Guard, error) { return nil, nil })
	require.NoError(t, err)
	rt.CloseIdleConnections()
	assert.Equal(t, 1, dep.closed)
}

// halfBroken returns a response together with an error, which a
// RoundTripper must not do; the response's body is drained and closed.
type halfBroken struct{ body *trackedBody }

func (d halfBroken) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: d.body}, errors.New("broken")
}

func TestTransportClosesBodyItDiscards(t *testing.T) {
	body := &trackedBody{Reader: strings.NewReader("left over")}
	rt, err := Transport(halfBroken{body}, func(string) (*sluice.Guard, error) { return sluice.New() })
	require.NoError(t, err)
	_, err = get(t, rt, "http://a.test/", nil)
	assert.ErrorContains(t, err, "broken")
	assert.True(t, body.closed)
}

// upgrader answers 101 with a body that is a connection.
type upgrader struct{}

type rwc struct {
	io.Reader
	io.Writer
}

func (rwc) Close() error { return nil }

func (upgrader) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: http.Header{},
		Body: rwc{strings.NewReader(""), io.Discard}, Request: r}, nil
}

func TestTransportKeepsUpgradedConnection(t *testing.T) {
	c := testpolicy.NewCounter()
	rt, err := Transport(upgrader{}, func(string) (*sluice.Guard, error) { return sluice.New(sluice.With(c)) })
	require.NoError(t, err)
	resp, err := get(t, rt, "http://a.test/", nil)
	require.NoError(t, err)
	_, ok := resp.Body.(io.ReadWriteCloser)
	assert.True(t, ok)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Success: 1}, c.Outcomes())
}

// A response whose body the caller drops without closing still ends: once
// the body is collected, the call counts as Ignored, so a half-open probe or
// a concurrency slot is not held forever.
func TestTransportDroppedBodyEndsTheCall(t *testing.T) {
	c := testpolicy.NewCounter()
	rt, err := Transport(bodyDependency{io.EOF}, func(string) (*sluice.Guard, error) {
		return sluice.New(sluice.With(c))
	})
	require.NoError(t, err)
	defer rt.Close()
	func() {
		resp, err := get(t, rt, "http://a.test/", nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode) // the body is never closed
	}()
	for i := 0; i < 200 && len(c.Outcomes()) == 0; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, c.Outcomes())
}

// Calls racing for a new host's Guard wait for one factory call: the
// factory runs once per host, so no Guard is made only to be closed.
func TestTransportMakesEachHostsGuardOnce(t *testing.T) {
	var made atomic.Int32
	gate := make(chan struct{})
	rt, err := Transport(&fakeDependency{status: http.StatusOK}, func(string) (*sluice.Guard, error) {
		made.Add(1)
		<-gate
		return sluice.New()
	})
	require.NoError(t, err)
	defer rt.Close()
	const callers = 16
	errs := make(chan error, callers)
	for range callers {
		go func() {
			resp, err := get(t, rt, "http://a.test/", nil)
			if err == nil {
				err = resp.Body.Close()
			}
			errs <- err
		}()
	}
	for made.Load() == 0 {
		runtime.Gosched()
	}
	close(gate)
	for range callers {
		require.NoError(t, <-errs)
	}
	assert.Equal(t, int32(1), made.Load())
	assert.Equal(t, 1, rt.Hosts())
}

// A guards function that panics does not wedge its host: the calls that waited
// for its Guard fail, the panic goes on up the call that ran it, and the
// next call asks the factory again.
func TestTransportFactoryPanicFailsOnlyItsCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var made atomic.Int32
		gate := make(chan struct{})
		rt, err := Transport(&fakeDependency{status: http.StatusOK}, func(string) (*sluice.Guard, error) {
			if made.Add(1) == 1 {
				<-gate
				panic("factory bug")
			}
			return sluice.New()
		})
		require.NoError(t, err)
		defer rt.Close()
		call := func() error {
			resp, err := get(t, rt, "http://a.test/", nil)
			if err == nil {
				err = resp.Body.Close()
			}
			return err
		}
		panicked := make(chan any, 1)
		go func() {
			defer func() { panicked <- recover() }()
			_ = call()
		}()
		synctest.Wait() // the first call is in the factory
		const waiters = 3
		errs := make(chan error, waiters)
		for range waiters {
			go func() { errs <- call() }()
		}
		synctest.Wait() // the others wait for its Guard
		close(gate)
		assert.Equal(t, "factory bug", <-panicked)
		for range waiters {
			err := <-errs
			require.Error(t, err)
			assert.Contains(t, err.Error(), `sluicehttp: guard for host "a.test": the guards function panicked`)
		}
		assert.Zero(t, rt.Hosts())
		require.NoError(t, call(), "the next call asks the factory again")
		assert.Equal(t, int32(2), made.Load())
		assert.Equal(t, 1, rt.Hosts())
	})
}

// slowDependency answers only when the request's context ends.
type slowDependency struct{}

func (slowDependency) RoundTrip(r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return nil, r.Context().Err()
}

// A host's Guard built with sluice.WithTimeout bounds the calls the
// Transport makes: the call ends at the deadline with a timeout error, which
// the breaker counts; a fast answer keeps its body readable.
func TestTransportAppliesTheGuardsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		b, err := breaker.New("dep", breaker.WithConsecutiveFailures(1), breaker.WithClock(clk))
		require.NoError(t, err)
		rt, err := Transport(slowDependency{}, func(string) (*sluice.Guard, error) {
			return sluice.New(sluice.With(b), sluice.WithClock(clk), sluice.WithTimeout(250*time.Millisecond))
		})
		require.NoError(t, err)
		defer rt.Close()
		start := time.Now()
		_, err = get(t, rt, "http://slow.test/", nil)
		require.ErrorIs(t, err, sluice.ErrTimeout)
		assert.Equal(t, 250*time.Millisecond, time.Since(start))
		assert.Equal(t, breaker.StateOpen, b.State())

		fast, err := Transport(&fakeDependency{status: http.StatusOK}, func(string) (*sluice.Guard, error) {
			return sluice.New(sluice.WithClock(clk), sluice.WithTimeout(250*time.Millisecond))
		})
		require.NoError(t, err)
		defer fast.Close()
		resp, err := get(t, fast, "http://fast.test/", nil)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "payload", string(body))
		require.NoError(t, resp.Body.Close())
	})
}

// A 429 with Retry-After opens the breakers at once, but the call still
// holds its concurrency slot until its body ends, as every call does.
func TestTransportRetryAfterHoldsTheSlotUntilTheBodyEnds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, "slow down")
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	rt, err := Transport(base, func(string) (*sluice.Guard, error) {
		b, err := adaptive.NewBulkhead(1)
		if err != nil {
			return nil, err
		}
		return sluice.New(sluice.With(b))
	})
	require.NoError(t, err)
	defer rt.Close()
	c := &http.Client{Transport: rt}
	first, err := c.Get(srv.URL)
	require.NoError(t, err)
	second, err := c.Get(srv.URL)
	if err == nil {
		_, _ = io.Copy(io.Discard, second.Body)
		_ = second.Body.Close()
	}
	require.ErrorIs(t, err, sluice.ErrConcurrencyLimited, "the first call's slot was freed before its body ended")
	_, _ = io.Copy(io.Discard, first.Body)
	require.NoError(t, first.Body.Close())
	third, err := c.Get(srv.URL)
	require.NoError(t, err, "the slot is back once the body ended")
	_ = third.Body.Close()
}

// panicOnce admits everything; its first Done panics (as a policy whose
// state listener panics does).
type panicOnce struct{ n *atomic.Int32 }

func (panicOnce) Name() string { return "test/panic-once" }
func (panicOnce) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1}, nil
}
func (panicOnce) Needs() sluice.Needs { return 0 }
func (p panicOnce) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {
	if p.n.Add(1) == 1 {
		panic("listener bug")
	}
}

// A policy whose Done panics when the response body is closed does not pin
// its host: the call still ends, and the host can be dropped.
func TestPanicInDoneAtBodyCloseReleasesTheHost(t *testing.T) {
	var n, made atomic.Int32
	rt, err := Transport(&fakeDependency{status: 200}, func(host string) (*sluice.Guard, error) {
		made.Add(1)
		b, err := adaptive.NewBulkhead(1)
		if err != nil {
			return nil, err
		}
		return sluice.New(sluice.With(b, panicOnce{&n}))
	}, WithMaxHosts(1))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })

	resp, err := get(t, rt, "http://a.test/", nil)
	require.NoError(t, err)
	assert.PanicsWithValue(t, "listener bug", func() { _ = resp.Body.Close() })

	for range 2 {
		resp, err = get(t, rt, "http://b.test/", nil)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	assert.Equal(t, 1, rt.Hosts())
	assert.EqualValues(t, 2, made.Load(), "b.test's Guard is made once: a.test, whose call ended, should have been dropped")
}

// answering answers every call with status, a Retry-After of a minute and
// a body that records its Close.
type answering struct {
	status int
	body   *trackedBody
}

func (d answering) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: d.status, Header: http.Header{"Retry-After": {"60"}}, Body: d.body, Request: r}, nil
}

// A panic after the dependency answered (the response classifier's, a state
// listener's as Retry-After opens the breaker, a policy's Done on an
// upgraded connection) fails the call and goes on up, and the response it
// never returned is closed: its connection is not left open.
func TestTransportPanicAfterTheAnswerClosesTheResponse(t *testing.T) {
	for _, tt := range []struct {
		name   string
		status int
		guard  func() (*sluice.Guard, error)
		opts   []TransportOption
	}{
		{"classifier", http.StatusOK, func() (*sluice.Guard, error) { return sluice.New() },
			[]TransportOption{WithResponseClassifier(func(*http.Response, error) sluice.Outcome { panic("classifier bug") })}},
		{"state listener", http.StatusServiceUnavailable, func() (*sluice.Guard, error) {
			b, err := breaker.New("dep")
			if err != nil {
				return nil, err
			}
			b.Subscribe(func(sluice.StateChange) { panic("listener bug") })
			return sluice.New(sluice.With(b))
		}, nil},
		{"upgrade", http.StatusSwitchingProtocols, func() (*sluice.Guard, error) {
			return sluice.New(sluice.With(panicOnce{new(atomic.Int32)}))
		}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := &trackedBody{Reader: strings.NewReader("payload")}
			rt, err := Transport(answering{tt.status, body}, func(string) (*sluice.Guard, error) { return tt.guard() }, tt.opts...)
			require.NoError(t, err)
			defer rt.Close()
			assert.Panics(t, func() { _, _ = get(t, rt, "http://a.test/", nil) })
			assert.True(t, body.closed, "the response's body is closed")
		})
	}
}

// Guard hands out the Guard a host's calls go through, once it is made.
func TestTransportGuardOfAHost(t *testing.T) {
	clock := sluice.NewManualClock(0)
	dep := &fakeDependency{status: http.StatusOK}
	rt, breakers := newTransport(t, dep, clock)
	_, ok := rt.Guard("a.test")
	assert.False(t, ok, "no call yet")
	for _, url := range []string{"http://a.test/x", "http://unguarded.test/x"} {
		resp, err := get(t, rt, url, nil)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	g, ok := rt.Guard("a.test")
	require.True(t, ok)
	assert.Equal(t, []sluice.Policy{breakers["a.test"]}, g.Policies())
	_, ok = rt.Guard("unguarded.test")
	assert.False(t, ok, "the factory gave it no Guard")

	breakers["a.test"].ForceOpen()
	_, err := get(t, rt, "http://a.test/x", nil)
	assert.ErrorIs(t, err, sluice.ErrCircuitOpen)
	require.NoError(t, rt.Close())
	_, ok = rt.Guard("a.test")
	assert.False(t, ok, "dropped by Close")
}

// TestTransportCallWithAnEndedContextIsNotCounted: a handler whose inherited
// deadline already passed calls its dependency. The call is never sent;
// counted as a failure, two of them opened the breaker of a host that never
// heard of them.
func TestTransportCallWithAnEndedContextIsNotCounted(t *testing.T) {
	clock := sluice.NewManualClock(0)
	dep := &fakeDependency{status: http.StatusOK}
	rt, err := Transport(http.DefaultTransport, func(string) (*sluice.Guard, error) {
		b, err := breaker.New("dep", breaker.WithConsecutiveFailures(2))
		if err != nil {
			return nil, err
		}
		return sluice.New(sluice.With(b), sluice.WithClock(clock))
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { dep.calls.Add(1) }))
	t.Cleanup(srv.Close)
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for range 3 {
		body := &trackedBody{Reader: strings.NewReader("x")}
		req, err := http.NewRequestWithContext(expired, http.MethodPost, srv.URL, body)
		require.NoError(t, err)
		_, err = rt.RoundTrip(req)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.True(t, body.closed)
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err, "the host's breaker is still closed")
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, int32(1), dep.calls.Load())
}

// A Retry-After holds open, of a breaker.Group shared by the hosts, the
// breaker of the host that sent it alone.
func TestTransportRetryAfterHoldsTheHostsBreakerOfAGroup(t *testing.T) {
	clock := sluice.NewManualClock(0)
	group, err := breaker.NewGroup("deps")
	require.NoError(t, err)
	shared, err := sluice.New(sluice.With(group), sluice.WithClock(clock))
	require.NoError(t, err)
	busy := &fakeDependency{status: http.StatusServiceUnavailable, header: http.Header{"Retry-After": {"60"}}}
	fine := &fakeDependency{status: http.StatusOK}
	rt, err := Transport(byHost{"busy.test": busy, "fine.test": fine}, func(string) (*sluice.Guard, error) { return shared, nil })
	require.NoError(t, err)
	resp, err := get(t, rt, "http://busy.test/x", nil)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	_, err = get(t, rt, "http://busy.test/x", nil)
	assert.ErrorIs(t, err, sluice.ErrCircuitOpen, "the busy host's breaker is held open")
	for range 3 {
		resp, err = get(t, rt, "http://fine.test/x", nil)
		require.NoError(t, err, "another host's breaker is not")
		require.NoError(t, resp.Body.Close())
	}
	assert.Equal(t, int32(1), busy.calls.Load())
}

// byHost sends each call to the RoundTripper of its host.
type byHost map[string]http.RoundTripper

func (b byHost) RoundTrip(r *http.Request) (*http.Response, error) { return b[r.URL.Host].RoundTrip(r) }

// A call whose context ends while it makes its host's Guard (a slow
// guards function) is not sent either, and counts for nothing: counted, it was
// a failure of a host that never heard of it, and opened its breaker.
func TestTransportCallWhoseContextEndsWhileItsGuardIsMadeIsNotCounted(t *testing.T) {
	clock := sluice.NewManualClock(0)
	var b *breaker.Breaker
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dep := &fakeDependency{status: http.StatusOK}
	next := failsEnded(dep)
	rt, err := Transport(next, func(string) (*sluice.Guard, error) {
		cancel() // the call's context ends while its Guard is made
		var err error
		b, err = breaker.New("dep", breaker.WithConsecutiveFailures(1))
		if err != nil {
			return nil, err
		}
		return sluice.New(sluice.With(b), sluice.WithClock(clock))
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	body := &trackedBody{Reader: strings.NewReader("x")}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://a.test/x", body)
	require.NoError(t, err)
	_, err = rt.RoundTrip(req)
	assert.ErrorIs(t, err, context.Canceled)
	assert.True(t, body.closed)
	require.NotNil(t, b, "the Guard is made for the call")
	assert.Equal(t, breaker.StateClosed, b.State(), "a call never sent is no failure of the host")
	assert.Zero(t, dep.calls.Load())
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// failsEnded sends calls to dep, and fails a call whose context ended
// without sending it, as http.Transport does.
func failsEnded(dep http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if err := r.Context().Err(); err != nil {
			return nil, err
		}
		return dep.RoundTrip(r)
	})
}

// A call whose context ends while a policy of its host's Guard makes it
// wait (a shaper's turn due at the deadline) is not sent, and gives back
// what the Guard took: it is no failure of the host.
func TestTransportCallWhoseContextEndsInTheGuardIsReleased(t *testing.T) {
	clock := sluice.NewManualClock(0)
	ctx := testpolicy.NewEndingContext()
	ends := &testpolicy.EndsOnAdmit{}
	ends.Set(ctx)
	b, err := breaker.New("dep", breaker.WithConsecutiveFailures(1))
	require.NoError(t, err)
	counter := testpolicy.NewCounter()
	dep := &fakeDependency{status: http.StatusOK}
	next := failsEnded(dep)
	rt, err := Transport(next, func(string) (*sluice.Guard, error) {
		return sluice.New(sluice.With(b, counter, ends), sluice.WithClock(clock))
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	body := &trackedBody{Reader: strings.NewReader("x")}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://a.test/x", body)
	require.NoError(t, err)
	_, err = rt.RoundTrip(req)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, body.closed)
	assert.Equal(t, breaker.StateClosed, b.State())
	assert.Equal(t, map[sluice.Outcome]int{sluice.Released: 1}, counter.Outcomes())
	assert.Zero(t, dep.calls.Load())
}

// swallowing is a Guard fallback that answers every error with success.
type swallowing struct{}

func (swallowing) Answer(context.Context, error) (string, error)  { return "swallow", nil }
func (swallowing) Declared(context.Context, error) (string, bool) { return "swallow", true }

// A fallback of the host's Guard that answers no *http.Response (one for
// Do: it swallows the error, or replaces it) declares an answer a
// RoundTripper cannot give: the call fails with an error that says so and
// wraps the transport's, and the Guard counts it as the failure it was.
func TestTransportGuardFallbackOfAnotherTypeIsReported(t *testing.T) {
	refused := errors.New("connection refused")
	dep := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, refused })
	for name, fb := range map[string]sluice.Fallback{"swallowing": swallowing{}, "replacing": replacing{errors.New("replaced")}} {
		counter := testpolicy.NewCounter()
		rt, err := Transport(dep, func(string) (*sluice.Guard, error) {
			return sluice.New(sluice.With(counter), sluice.WithFallback(fb))
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = rt.Close() })
		resp, err := get(t, rt, "http://a.test/", nil)
		assert.Nil(t, resp, name)
		assert.ErrorIs(t, err, refused, name)
		assert.ErrorContains(t, err, "answers another type than *http.Response", name)
		assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, counter.Outcomes(), name)
	}
}

// The host's Guard's fallbacks answering an *http.Response answer its
// rejections and the calls that fail before a response, each with a
// response of its own; one that declines has its error returned. A
// response, even a 503, is returned as it came.
func TestTransportResponseFallbacks(t *testing.T) {
	var fail atomic.Bool
	dep := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if fail.Load() {
			return nil, errors.New("connection refused")
		}
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Body: http.NoBody, Request: r}, nil
	})
	cached := func(context.Context, error) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"X-From": {"fallback"}},
			Body: io.NopCloser(strings.NewReader("cached"))}, nil
	}
	quota := errors.New("quota spent")
	fb, err := degrade.New(degrade.OnCircuitOpen(cached), degrade.OnError(cached),
		degrade.OnRateLimited(func(context.Context, error) (*http.Response, error) { return nil, quota }))
	require.NoError(t, err)
	var served []string
	br, err := breaker.New("dep", breaker.WithConsecutiveFailures(1))
	require.NoError(t, err)
	rt, err := Transport(dep, func(string) (*sluice.Guard, error) {
		return sluice.New(sluice.With(br), sluice.WithFallback(fb),
			sluice.OnFallback(func(_ context.Context, e sluice.FallbackEvent) { served = append(served, e.Fallback) }))
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })

	resp, err := get(t, rt, "http://a.test/", nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "a response stands")
	require.NoError(t, resp.Body.Close())
	for range 2 { // the breaker is open: each call answered afresh
		resp, err = get(t, rt, "http://a.test/x", nil)
		require.NoError(t, err)
		assert.Equal(t, "fallback", resp.Header.Get("X-From"))
		assert.Equal(t, "/x", resp.Request.URL.Path, "the request it answers")
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "cached", string(b))
	}
	assert.Len(t, served, 2)

	// Without the breaker: a transport error is answered, and a rate
	// limit's declining fallback has the last word.
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1)
	require.NoError(t, err)
	rt2, err := Transport(dep, func(string) (*sluice.Guard, error) {
		return sluice.New(sluice.With(tb), sluice.WithFallback(fb))
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt2.Close() })
	fail.Store(true)
	resp, err = get(t, rt2, "http://a.test/", nil)
	require.NoError(t, err)
	assert.Equal(t, "fallback", resp.Header.Get("X-From"), "the transport's error answered")
	require.NoError(t, resp.Body.Close())
	_, err = get(t, rt2, "http://a.test/", nil)
	assert.Same(t, quota, err, "declined")
}

// replacing is a Guard fallback that answers every error with its own.
type replacing struct{ err error }

func (r replacing) Answer(context.Context, error) (string, error) { return "replace", r.err }
func (replacing) Declared(context.Context, error) (string, bool)  { return "replace", true }

// Hosts returns the number of hosts whose Guards are kept (more than
// WithMaxHosts while more hosts than that have calls in flight).
func (t *RoundTripper) Hosts() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}

// oneLivePerName is an Observer that, as a dashboard does, refuses a
// second live Guard of a name; its detach waits for release.
type oneLivePerName struct {
	mu      sync.Mutex
	live    map[string]bool
	release chan struct{}
}

func (o *oneLivePerName) Attach(g *sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.live[g.Name()] {
		return nil, nil, fmt.Errorf("a Guard named %q is live already", g.Name())
	}
	o.live[g.Name()] = true
	return nil, func() {
		<-o.release
		o.mu.Lock()
		delete(o.live, g.Name())
		o.mu.Unlock()
	}, nil
}

// A host dropped for WithMaxHosts has its Guard closed before a call to
// it makes the next: a host never has two Guards at once, so a guards
// function that names them by host, observed, does not fail.
func TestTransportDroppedHostIsClosedBeforeItsNextGuard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &oneLivePerName{live: map[string]bool{}, release: make(chan struct{})}
		var release sync.Once
		defer release.Do(func() { close(obs.release) }) // a failure leaves no goroutine blocked
		rt, err := Transport(&fakeDependency{status: http.StatusOK}, func(host string) (*sluice.Guard, error) {
			return sluice.New(sluice.WithName(host), sluice.WithObserver(obs))
		}, WithMaxHosts(1))
		require.NoError(t, err)
		call := func(host string) error {
			resp, err := get(t, rt, "http://"+host+"/x", nil)
			if err == nil {
				_ = resp.Body.Close()
			}
			return err
		}
		require.NoError(t, call("a.test"))
		go func() { _ = call("b.test") }() // drops a.test, whose Guard's close waits
		synctest.Wait()
		var again error
		done := make(chan struct{})
		go func() {
			defer close(done)
			again = call("a.test")
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("a.test's next Guard was made while its last was still closing")
		default:
		}
		release.Do(func() { close(obs.release) })
		<-done
		require.NoError(t, again)
		require.NoError(t, rt.Close())
	})
}

// Under churn (callers to more hosts than WithMaxHosts keeps), no call
// meets a host's Guard still open from before.
func TestTransportHostChurnNeverHasTwoGuardsOfAHost(t *testing.T) {
	obs := &oneLivePerName{live: map[string]bool{}, release: make(chan struct{})}
	close(obs.release)
	rt, err := Transport(&fakeDependency{status: http.StatusOK}, func(host string) (*sluice.Guard, error) {
		return sluice.New(sluice.WithName(host), sluice.WithObserver(obs))
	}, WithMaxHosts(3))
	require.NoError(t, err)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://h%d.test/x", (w*7+i)%9), nil)
				resp, err := rt.RoundTrip(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_ = resp.Body.Close()
			}
		})
	}
	wg.Wait()
	assert.Zero(t, failed.Load(), "calls failed of 1600")
	require.NoError(t, rt.Close())
}

// panicsOnce is an Observer whose first detach panics.
type panicsOnce struct {
	mu   sync.Mutex
	done bool
}

func (o *panicsOnce) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return nil, func() {
		o.mu.Lock()
		first := !o.done
		o.done = true
		o.mu.Unlock()
		if first {
			panic("detach")
		}
	}, nil
}

// A dropped host whose Guard's Close panics is not left waiting for that
// close for good: the next call to it makes its next Guard.
func TestTransportDroppedHostWhoseClosePanicsIsNotWedged(t *testing.T) {
	obs := &panicsOnce{}
	rt, err := Transport(&fakeDependency{status: http.StatusOK}, func(host string) (*sluice.Guard, error) {
		return sluice.New(sluice.WithName(host), sluice.WithObserver(obs))
	}, WithMaxHosts(1))
	require.NoError(t, err)
	call := func(ctx context.Context, host string) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/x", nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}
	require.NoError(t, call(context.Background(), "a.test"))
	assert.Error(t, call(context.Background(), "b.test"), "dropping a.test, its Close panicked")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	assert.NoError(t, call(ctx, "a.test"))
	require.NoError(t, rt.Close())
}

// A call to a host while Close closes its Guard waits for it, and makes
// the next: never two Guards of a host open at once.
func TestTransportCallDuringCloseWaitsForTheHostsGuard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &oneLivePerName{live: map[string]bool{}, release: make(chan struct{})}
		var release sync.Once
		defer release.Do(func() { close(obs.release) })
		rt, err := Transport(&fakeDependency{status: http.StatusOK}, func(host string) (*sluice.Guard, error) {
			return sluice.New(sluice.WithName(host), sluice.WithObserver(obs))
		})
		require.NoError(t, err)
		resp, err := get(t, rt, "http://a.test/x", nil)
		require.NoError(t, err)
		_ = resp.Body.Close()
		go func() { _ = rt.Close() }() // a.test's detach waits
		synctest.Wait()
		done := make(chan error)
		go func() {
			resp, err := get(t, rt, "http://a.test/x", nil)
			if err == nil {
				_ = resp.Body.Close()
			}
			done <- err
		}()
		synctest.Wait()
		release.Do(func() { close(obs.release) })
		assert.NoError(t, <-done)
	})
}

// A Close that panics while RoundTripper.Close closes many hosts' Guards
// leaves none of those hosts waiting for good.
func TestTransportCloseThatPanicsWedgesNoHost(t *testing.T) {
	obs := &panicsOnce{}
	rt, err := Transport(&fakeDependency{status: http.StatusOK}, func(host string) (*sluice.Guard, error) {
		return sluice.New(sluice.WithName(host), sluice.WithObserver(obs))
	})
	require.NoError(t, err)
	for _, host := range []string{"a.test", "b.test", "c.test"} {
		resp, err := get(t, rt, "http://"+host+"/x", nil)
		require.NoError(t, err)
		_ = resp.Body.Close()
	}
	assert.Panics(t, func() { _ = rt.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, host := range []string{"a.test", "b.test", "c.test"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/x", nil)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err, host)
		_ = resp.Body.Close()
	}
	require.NoError(t, rt.Close())
}

// A caller whose context is canceled with a cause (context.WithCancelCause,
// as errgroup.WithContext cancels the siblings of a failed call) gets from
// net/http the cause, not context.Canceled, both from RoundTrip and from a
// body read. The call is Ignored all the same: the caller's own cancel
// says nothing of the host, and must not open its breaker.
func TestTransportCallerCanceledWithACauseIsIgnored(t *testing.T) {
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("part"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	siblingFailed := errors.New("a sibling call failed")

	newRT := func(t *testing.T) (*RoundTripper, *testpolicy.Counter) {
		count := testpolicy.NewCounter()
		rt, err := Transport(base, func(string) (*sluice.Guard, error) { return sluice.New(sluice.With(count)) })
		require.NoError(t, err)
		t.Cleanup(func() { _ = rt.Close() })
		return rt, count
	}

	t.Run("while waiting for the answer", func(t *testing.T) {
		rt, count := newRT(t)
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/slow", nil)
		require.NoError(t, err)
		go func() {
			<-arrived
			cancel(siblingFailed)
		}()
		_, err = rt.RoundTrip(req)
		require.Error(t, err)
		assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, count.Outcomes(),
			"the caller's cancellation (%v) was counted against the host", err)
	})

	t.Run("while reading the body", func(t *testing.T) {
		rt, count := newRT(t)
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/stream", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		_, err = io.ReadFull(resp.Body, make([]byte, 4))
		require.NoError(t, err)
		cancel(siblingFailed)
		_, err = io.ReadAll(resp.Body)
		require.Error(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, count.Outcomes(),
			"the caller's cancellation (%v) was counted against the host", err)
	})

	t.Run("a fan-out does not open the host's breaker", func(t *testing.T) {
		rt, err := Transport(base, func(string) (*sluice.Guard, error) {
			b, err := breaker.New("dep", breaker.WithConsecutiveFailures(3))
			if err != nil {
				return nil, err
			}
			return sluice.New(sluice.With(b))
		})
		require.NoError(t, err)
		defer rt.Close()
		for range 3 {
			ctx, cancel := context.WithCancelCause(context.Background())
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/slow", nil)
			require.NoError(t, err)
			go func() {
				<-arrived
				cancel(siblingFailed)
			}()
			_, _ = rt.RoundTrip(req)
			cancel(nil)
		}
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/healthy", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err, "three cancelled callers opened the breaker of a healthy host")
		cancel()
		_ = resp.Body.Close()
	})
}

// eventLog is an Observer that keeps the CallEvents it hears.
type eventLog struct {
	mu     sync.Mutex
	events []sluice.CallEvent
}

func (l *eventLog) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return func(_ context.Context, e sluice.CallEvent) {
		l.mu.Lock()
		l.events = append(l.events, e)
		l.mu.Unlock()
	}, nil, nil
}

// stallingBody answers its first read, then blocks until ctx ends and
// fails with its cause, as net/http's body does when the request's
// context ends.
type stallingBody struct {
	ctx  context.Context
	sent bool
}

func (b *stallingBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, "part"), nil
	}
	<-b.ctx.Done()
	return 0, context.Cause(b.ctx)
}

func (*stallingBody) Close() error { return nil }

type stallingDependency struct{}

func (stallingDependency) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: &stallingBody{ctx: r.Context()}, Request: r}, nil
}

// The Guard's timeout runs until the response's body ends: when it passes
// while the body is read, the call's end is a timeout, for the Guard's
// observers and Stats, as when it passes before the headers came.
func TestTransportBodyReadPastTheDeadlineIsATimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &eventLog{}
		rt, err := Transport(stallingDependency{}, func(host string) (*sluice.Guard, error) {
			return sluice.New(sluice.WithName(host), sluice.WithObserver(log), sluice.WithTimeout(100*time.Millisecond))
		})
		require.NoError(t, err)
		defer rt.Close()
		req, err := http.NewRequest(http.MethodGet, "http://dep.test/x", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.ErrorIs(t, err, sluice.ErrTimeout, "the body's read ended with the Guard's deadline")
		_ = resp.Body.Close()

		g, ok := rt.Guard("dep.test")
		require.True(t, ok)
		var timeouts uint64
		for _, n := range g.Stats().Timeouts.Counts {
			timeouts += n
		}
		assert.Equal(t, uint64(1), timeouts, "the call that ran past the Guard's deadline is not counted as a timeout")
		log.mu.Lock()
		defer log.mu.Unlock()
		require.Len(t, log.events, 1)
		assert.Equal(t, sluice.Failure, log.events[0].Outcome)
		assert.ErrorIs(t, log.events[0].Err, sluice.ErrTimeout, "the observers were told of no timeout")
	})
}

// A request without a URL is an error, its body closed, as net/http's
// Transport answers it: not a panic.
func TestTransportNilURLIsAnError(t *testing.T) {
	rt, err := Transport(&fakeDependency{status: http.StatusOK}, func(string) (*sluice.Guard, error) { return sluice.New() })
	require.NoError(t, err)
	defer rt.Close()
	body := &trackedBody{Reader: strings.NewReader("x")}
	req := &http.Request{Method: http.MethodPut, Header: http.Header{}, Body: body}
	var resp *http.Response
	require.NotPanics(t, func() { resp, err = rt.RoundTrip(req) })
	assert.Nil(t, resp)
	assert.Error(t, err)
	assert.True(t, body.closed, "the request's body was left open")
}

// An error reading the body of a 2xx is classified as the same error
// before the headers: by the Guard's Classifier (or
// WithResponseClassifier). A connection reset the Classifier ignores is
// not counted against the host after the headers either.
func TestTransportBodyReadErrorIsClassified(t *testing.T) {
	reset := errors.New("connection reset")
	ignoreAll := sluice.WithClassifier(func(error) sluice.Outcome { return sluice.Ignored })
	for name, dep := range map[string]http.RoundTripper{
		"before the headers": &fakeDependency{err: reset},
		"in the body":        bodyDependency{reset},
	} {
		t.Run(name, func(t *testing.T) {
			count := testpolicy.NewCounter()
			rt, err := Transport(dep, func(string) (*sluice.Guard, error) {
				return sluice.New(sluice.With(count), ignoreAll)
			})
			require.NoError(t, err)
			defer rt.Close()
			req, err := http.NewRequest(http.MethodGet, "http://dep.test/x", nil)
			require.NoError(t, err)
			if resp, err := rt.RoundTrip(req); err == nil {
				_, _ = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
			}
			assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, count.Outcomes())
		})
	}
}

// panicBody fails its first read.
type panicBody struct{}

func (panicBody) Read([]byte) (int, error) { return 0, errors.New("connection reset") }
func (panicBody) Close() error             { return nil }

type panicBodyDependency struct{}

func (panicBodyDependency) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: panicBody{}, Request: r}, nil
}

// A classifier that panics on a body's read error fails the call and lets
// go of its host, as a panic in RoundTrip does: the call is not left
// unended (a slot, a probe held) for the caller's Close to end a Success.
func TestTransportClassifierPanicInBodyReadEndsTheCall(t *testing.T) {
	limit := testpolicy.NewCounter()
	var g *sluice.Guard
	rt, err := Transport(panicBodyDependency{}, func(string) (*sluice.Guard, error) {
		var err error
		g, err = sluice.New(sluice.With(limit), sluice.WithClassifier(func(err error) sluice.Outcome {
			panic("classifier bug")
		}))
		return g, err
	})
	require.NoError(t, err)
	defer rt.Close()
	req, err := http.NewRequest(http.MethodGet, "http://dep.test/", nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	func() {
		defer func() { _ = recover() }()
		func() {
			defer resp.Body.Close() // the caller's usual defer
			_, _ = io.ReadAll(resp.Body)
		}()
	}()
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, limit.Outcomes(), "a call whose classifier panicked in a body read")
}

// errLateNotFound is an error a test's Classifier ignores.
var errLateNotFound = errors.New("not found")

// lateNotFound is a RoundTripper that answers errLateNotFound once its
// request's context has ended.
type lateNotFound struct{}

func (lateNotFound) RoundTrip(r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return nil, errLateNotFound
}

// As Guard.Do has it: past the Guard's deadline, an error the Guard's
// Classifier ignores stands; the Transport agrees.
func TestTransportIgnoredErrorPastTheDeadlineStands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		classify := func(err error) sluice.Outcome {
			if errors.Is(err, errLateNotFound) {
				return sluice.Ignored
			}
			return sluice.DefaultClassifier(err)
		}
		c := testpolicy.NewCounter()
		rt, err := Transport(lateNotFound{}, func(string) (*sluice.Guard, error) {
			return sluice.New(sluice.With(c), sluice.WithTimeout(100*time.Millisecond), sluice.WithClassifier(classify))
		})
		require.NoError(t, err)
		defer rt.Close()
		_, err = get(t, rt, "http://a.test/", nil)
		require.ErrorIs(t, err, errLateNotFound)
		assert.NotErrorIs(t, err, sluice.ErrTimeout, "an ignored error past the deadline became the timeout")

		// Guard.Do with the same Guard for comparison.
		g, gerr := sluice.New(sluice.WithTimeout(100*time.Millisecond), sluice.WithClassifier(classify))
		require.NoError(t, gerr)
		derr := g.Do(context.Background(), func(ctx context.Context) error { <-ctx.Done(); return errLateNotFound })
		assert.NotErrorIs(t, derr, sluice.ErrTimeout)
	})
}
