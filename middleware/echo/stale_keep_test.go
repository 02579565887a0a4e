package sluiceecho

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
)

func staleGuard(t *testing.T) (*onOff, *middleware.StaleCache, *sluice.Guard) {
	t.Helper()
	sw := &onOff{}
	cache, err := middleware.NewStaleCache(8, time.Minute, 1024)
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(sw), sluice.WithClock(sluice.NewManualClock(time.Hour)), sluice.WithFallback(cache))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return sw, cache, g
}

// A handler that has committed its 200 and then fails mid-body (c.Stream,
// its reader failing) sent a cut response: no stale copy is kept of it.
func TestEchoBodyCutByAnErrorIsNoStaleCopy(t *testing.T) {
	sw, cache, g := staleGuard(t)
	e := echo.New()
	e.Use(mw(t, WithGuard(g)))
	e.GET("/report", func(c echo.Context) error {
		return c.Stream(http.StatusOK, "text/csv",
			io.MultiReader(strings.NewReader("id,total\n1,10\n"), iotest.ErrReader(errors.New("database gone"))))
	})
	rec := do(e, http.MethodGet, "/report")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "id,total\n1,10\n", rec.Body.String(), "the client got the first rows only")

	sw.on = true
	rec = do(e, http.MethodGet, "/report")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "a cut body served as whole: %q", rec.Body.String())
	assert.Equal(t, 0, cache.Len())
}

// An inner middleware that hands the handler a rewritten request
// (echo.WrapMiddleware(http.StripPrefix)) does not change the URI the copy
// is kept under: the request as it came, which a lookup sees.
func TestEchoCopyIsKeptUnderTheURIItAnswered(t *testing.T) {
	sw, _, g := staleGuard(t)
	e := echo.New()
	e.Use(mw(t, WithGuard(g)))
	v1 := e.Group("/v1", echo.WrapMiddleware(func(h http.Handler) http.Handler { return http.StripPrefix("/v1", h) }))
	v1.GET("/*", func(c echo.Context) error {
		return c.String(http.StatusOK, "document "+c.Param("*"))
	})
	require.Equal(t, "document x", do(e, http.MethodGet, "/v1/x").Body.String())
	require.Equal(t, "document v1/x", do(e, http.MethodGet, "/v1/v1/x").Body.String())

	sw.on = true
	rec := do(e, http.MethodGet, "/v1/x")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "document x", rec.Body.String(), "/v1/x must be answered with its own copy")
}
