package sluiceecho

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

// A handler that wrote nothing by the Guard's deadline timed out, as in
// the net/http adapter. Its call is a failure, and its empty
// answer is no good copy for the stale cache, which would otherwise serve
// an empty 200 in place of the route's rejection.
func TestNothingWrittenByTheDeadlineIsATimeout(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	sw := &onOff{}
	counter := testpolicy.NewCounter()
	cache, err := middleware.NewStaleCache(8, time.Minute, 1024)
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(counter, sw), sluice.WithClock(clock),
		sluice.WithFallback(cache), sluice.WithTimeout(20*time.Millisecond))
	require.NoError(t, err)
	defer g.Close()
	e := echo.New()
	e.Use(mw(t, WithGuard(g)))
	e.GET("/prices", func(c echo.Context) error {
		<-c.Request().Context().Done() // the dependency did not answer in time
		return nil
	})
	do(e, http.MethodGet, "/prices")
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, counter.Outcomes(), "timed out with nothing written")
	assert.Zero(t, cache.Len(), "a timed-out empty answer is no good response to keep")

	sw.on = true
	rec := do(e, http.MethodGet, "/prices")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code,
		"the rejection, not an empty stale 200 (body %q, Age %q)", rec.Body.String(), rec.Header().Get("Age"))
}

// A fallback that answers a rejection the handler returned goes out, as
// net/http's Reject answers, without the freshness
// (Cache-Control, Expires) the handler set for its own body: a placeholder
// must not be cached for an hour.
func TestARejectionsFallbackDropsTheHandlersFreshness(t *testing.T) {
	fb, err := degrade.New(degrade.OnCircuitOpen(degrade.Value[http.Handler](http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "prices are unavailable, try again shortly")
	}))))
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(testpolicy.NewCounter()), sluice.WithClock(sluice.NewManualClock(0)), sluice.WithFallback(fb))
	require.NoError(t, err)
	defer g.Close()
	dep := newGuard(t, testpolicy.Rejecter{D: sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: 3 * time.Second, Cause: sluice.ErrCircuitOpen}})
	e := echo.New()
	e.Use(mw(t, WithGuard(g)))
	e.GET("/prices", func(c echo.Context) error {
		c.Response().Header().Set("Cache-Control", "public, max-age=3600")
		c.Response().Header().Set("Expires", "Thu, 01 Jan 2099 00:00:00 GMT")
		return dep.Do(c.Request().Context(), func(context.Context) error { return nil })
	})
	rec := do(e, http.MethodGet, "/prices")
	require.Equal(t, "prices are unavailable, try again shortly", rec.Body.String())
	assert.Empty(t, rec.Header().Get("Cache-Control"), "the handler's freshness stays on the placeholder")
	assert.Empty(t, rec.Header().Get("Expires"))
}
