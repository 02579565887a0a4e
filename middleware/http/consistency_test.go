package sluicehttp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

func timeouts(g *sluice.Guard) (n uint64) {
	for _, c := range g.Stats().Timeouts.Counts {
		n += c
	}
	return n
}

// A request whose handler hangs until the Guard's deadline and writes
// nothing timed out: the Guard's Stats count it in Timeouts and its
// observers hear an Err matching ErrTimeout, as for Guard.Do, the gRPC
// unary interceptor and the Transport.
func TestMiddlewareTimeoutIsCountedAsATimeoutInStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Do: the baseline.
		dlog := &eventLog{}
		dg, err := sluice.New(sluice.WithObserver(dlog), sluice.WithTimeout(100*time.Millisecond))
		require.NoError(t, err)
		err = dg.Do(context.Background(), func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		require.ErrorIs(t, err, sluice.ErrTimeout)
		require.Equal(t, uint64(1), timeouts(dg), "Do counts a timeout")

		// The middleware, the same Guard and the same call.
		log := &eventLog{}
		g, err := sluice.New(sluice.WithObserver(log), sluice.WithTimeout(100*time.Millisecond))
		require.NoError(t, err)
		m, err := Middleware(WithGuard(g))
		require.NoError(t, err)
		h := m(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // the dependency did not answer in time
		}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))

		log.mu.Lock()
		require.Len(t, log.events, 1)
		ev := log.events[0]
		log.mu.Unlock()
		assert.Equal(t, sluice.Failure, ev.Outcome)
		assert.True(t, errors.Is(ev.Err, sluice.ErrTimeout), "observers were told no timeout: Err %v", ev.Err)
		assert.Equal(t, uint64(1), timeouts(g), "Stats.Timeouts: the timed-out request counted as a plain failure")
	})
}

// A handler whose goroutine ends with runtime.Goexit (t.FailNow in a test
// server) never answered: a Failure, as Guard.Do and the gRPC
// interceptors end it, not the Success of a status left unwritten.
func TestMiddlewareHandlerGoexitIsAFailure(t *testing.T) {
	do := testpolicy.NewCounter()
	dg, err := sluice.New(sluice.With(do))
	require.NoError(t, err)
	goexitIn(t, func() { _ = dg.Do(context.Background(), func(context.Context) error { runtime.Goexit(); return nil }) })
	require.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, do.Outcomes(), "Do: the baseline")

	counter := testpolicy.NewCounter()
	g, err := sluice.New(sluice.With(counter))
	require.NoError(t, err)
	m, err := Middleware(WithGuard(g))
	require.NoError(t, err)
	h := m(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runtime.Goexit() }))
	goexitIn(t, func() { h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil)) })
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, counter.Outcomes(), "a handler that Goexited counted as answered")
}

// goexitIn runs fn on a goroutine of its own and waits for it to end.
func goexitIn(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the goroutine did not end")
	}
}
