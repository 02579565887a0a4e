package sluiceecho

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

// callLog records the CallEvents of a Guard.
type callLog struct {
	mu     sync.Mutex
	events []sluice.CallEvent
}

func (l *callLog) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return func(_ context.Context, e sluice.CallEvent) {
		l.mu.Lock()
		l.events = append(l.events, e)
		l.mu.Unlock()
	}, nil, nil
}

// A handler that returns its context's error once the Guard's deadline has
// passed timed out: Stats count it in Timeouts and the observers hear an
// Err matching ErrTimeout, as for Guard.Do and the gRPC interceptor.
func TestEchoTimeoutIsCountedAsATimeoutInStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &callLog{}
		g, err := sluice.New(sluice.WithObserver(log), sluice.WithTimeout(100*time.Millisecond))
		require.NoError(t, err)
		e := echo.New()
		e.Use(mw(t, WithGuard(g)))
		e.GET("/a", func(c echo.Context) error {
			<-c.Request().Context().Done()
			return c.Request().Context().Err()
		})
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/a", nil))

		var timeouts uint64
		for _, n := range g.Stats().Timeouts.Counts {
			timeouts += n
		}
		log.mu.Lock()
		require.Len(t, log.events, 1)
		ev := log.events[0]
		log.mu.Unlock()
		assert.Equal(t, sluice.Failure, ev.Outcome)
		assert.True(t, errors.Is(ev.Err, sluice.ErrTimeout), "observers were told no timeout: Err %v", ev.Err)
		assert.Equal(t, uint64(1), timeouts, "Stats.Timeouts: the timed-out request counted as a plain failure")
	})
}

// A handler that ends its goroutine with runtime.Goexit never returns: the
// call still ends, a Failure, and its policies give back what they took (a
// bulkhead's slot).
func TestEchoHandlerGoexitEndsTheCall(t *testing.T) {
	counter := testpolicy.NewCounter()
	bh, err := adaptive.NewBulkhead(1)
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(counter, bh))
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithGuard(g)))
	e.GET("/exit", func(echo.Context) error { runtime.Goexit(); return nil })
	e.GET("/ok", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })

	done := make(chan struct{})
	go func() {
		defer close(done)
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/exit", nil))
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's goroutine did not end")
	}
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, counter.Outcomes(), "the call that Goexit ended was never reported")

	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ok", nil))
	assert.Equal(t, http.StatusOK, rec.Code, "the bulkhead's one slot leaked: the next request is rejected")
}
