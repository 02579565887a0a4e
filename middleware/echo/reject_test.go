package sluiceecho

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/ratelimit"
)

// A flood of rejections the handler returns (every request meeting its
// dependency's open breaker: an outage) allocates nothing of sluice's own:
// the route keeps their problem answer, as for its own Guard's.
func TestHandlerRejectionAllocatesNothing(t *testing.T) {
	open, err := breaker.New("dep")
	require.NoError(t, err)
	open.ForceOpen()
	dep := newGuard(t, open)
	fw, err := ratelimit.NewFixedWindow(1<<30, time.Hour, ratelimit.WithName("ratelimit/api"))
	require.NoError(t, err)
	route := newGuard(t, fw)
	passThrough := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return next(c) }
	}
	handler := func(c echo.Context) error {
		return dep.Do(c.Request().Context(), func(context.Context) error { return nil })
	}
	measure := func(e *echo.Echo) float64 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		w := &nopWriter{h: http.Header{}}
		e.ServeHTTP(w, req)
		return testing.AllocsPerRun(200, func() { e.ServeHTTP(w, req) })
	}
	// The baseline: the same dependency call, its rejection answered by
	// the handler itself, behind a middleware that does nothing.
	bare := echo.New()
	bare.GET("/", func(c echo.Context) error {
		_ = handler(c)
		return c.NoContent(http.StatusServiceUnavailable)
	}, passThrough)
	e := echo.New()
	e.GET("/", handler, mw(t, WithGuard(route)))
	// At most one allocation over the baseline, which the middleware's own
	// rejections make too (Echo's error path); the race detector makes
	// sync.Pool drop a share of what it is given.
	slack := 1.0
	if raceEnabled {
		slack = 2
	}
	base := measure(bare)
	got := measure(e)
	assert.LessOrEqual(t, got-base, slack, "a handler's rejection allocates %v of sluice's own", got-base)
}

// A rejection by the route's own Guard that the handler met calling it
// (the Guard a rules.Loader hands out by name is the one its routes use)
// keeps the window of its policy, which the route knows.
func TestRouteGuardsOwnRejectionInTheHandlerKeepsItsWindow(t *testing.T) {
	fw, err := ratelimit.NewFixedWindow(1, time.Minute, ratelimit.WithName("ratelimit/api"))
	require.NoError(t, err)
	g := newGuard(t, fw)
	e := echo.New()
	e.GET("/", func(c echo.Context) error {
		return g.Do(c.Request().Context(), func(context.Context) error { return nil })
	}, mw(t, WithGuard(g)))
	rec := do(e, http.MethodGet, "/") // admitted, then its own call to g is over the limit
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, `"ratelimit/api";q=1;w=60`, rec.Header().Get("RateLimit-Policy"))
}
