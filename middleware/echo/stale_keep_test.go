package sluiceecho

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
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

// cutWriter takes the first limit bytes of the body, then fails every
// write, as a connection gone mid-body does.
type cutWriter struct {
	*httptest.ResponseRecorder
	limit int
}

func (w *cutWriter) Write(b []byte) (int, error) {
	room := w.limit - w.Body.Len()
	if room <= 0 {
		return 0, errors.New("write: broken pipe")
	}
	if len(b) > room {
		n, _ := w.ResponseRecorder.Write(b[:room])
		return n, errors.New("write: broken pipe")
	}
	return w.ResponseRecorder.Write(b)
}

// A body whose write failed beneath (the client got part of it) is no
// whole response: no stale copy is kept of it, to be served later as a
// complete 200.
func TestEchoFailedWriteIsNoStaleCopy(t *testing.T) {
	sw, cache, g := staleGuard(t)
	e := echo.New()
	e.Use(mw(t, WithGuard(g)))
	e.GET("/doc", func(c echo.Context) error {
		// A handler that streams its rows and does not check each write.
		_, _ = c.Response().Write([]byte("row 1\n"))
		_, _ = c.Response().Write([]byte("row 2\n"))
		return nil
	})
	w := &cutWriter{ResponseRecorder: httptest.NewRecorder(), limit: 6}
	e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/doc", nil))
	require.Equal(t, "row 1\n", w.Body.String(), "the client got the first row only")

	sw.on = true
	rec := do(e, http.MethodGet, "/doc")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "a cut body served as whole: %q", rec.Body.String())
	assert.Equal(t, 0, cache.Len())
}

// A rejection the handler returns for a client gone is answered, and
// counted, by no fallback, as in the net/http and gRPC adapters.
func TestEchoReturnedRejectionForAClientGoneIsAnsweredByNoFallback(t *testing.T) {
	counter := testpolicy.NewCounter()
	fb, err := degrade.New(degrade.OnCircuitOpen(answering("fallback")))
	require.NoError(t, err)
	served := 0
	g, err := sluice.New(sluice.With(counter), sluice.WithFallback(fb),
		sluice.OnFallback(func(context.Context, sluice.FallbackEvent) { served++ }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	d := sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: 3 * time.Second, Cause: sluice.ErrCircuitOpen}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := echo.New()
	e.Use(mw(t, WithGuard(g)))
	e.GET("/prices", func(c echo.Context) error {
		cancel() // the client goes away while the dependency's call is rejected
		return sluice.Rejection(d)
	})
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/prices", nil).WithContext(ctx))
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, counter.Outcomes())
	assert.Zero(t, served, "a fallback answered a request whose client had gone: %d %q", rec.Code, rec.Body.String())
}

// An inner Echo middleware that gives the handler a context of its own and
// cancels it on return (echo's own ContextTimeout does) is no client gone:
// a rejection the handler returns is still answered by the route Guard's
// fallback.
func TestEchoInnerMiddlewareCancelIsNoClientGone(t *testing.T) {
	open, err := breaker.New("dep")
	require.NoError(t, err)
	open.ForceOpen()
	dep := newGuard(t, open)

	fb, err := degrade.New(degrade.OnRejected(answering("fallback")))
	require.NoError(t, err)
	served := 0
	route, err := sluice.New(sluice.WithFallback(fb),
		sluice.OnFallback(func(context.Context, sluice.FallbackEvent) { served++ }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = route.Close() })

	for name, inner := range map[string]echo.MiddlewareFunc{
		"echo ContextTimeout": echomw.ContextTimeout(time.Minute),
		"own WithCancel": func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				ctx, cancel := context.WithCancel(c.Request().Context())
				defer cancel()
				c.SetRequest(c.Request().WithContext(ctx))
				return next(c)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			served = 0
			e := echo.New()
			e.GET("/", func(c echo.Context) error {
				return dep.Do(c.Request().Context(), func(context.Context) error { return nil })
			}, mw(t, WithGuard(route)), inner)
			rec := do(e, http.MethodGet, "/")
			assert.Equal(t, http.StatusOK, rec.Code, "the client is still there: body %q", rec.Body.String())
			assert.Equal(t, "fallback", rec.Body.String())
			assert.Equal(t, 1, served, "the fallback answered and was counted")
		})
	}
}

// A request's credentials are judged as it came: an authentication step
// that removes the Authorization field once checked does not make alice's
// answer a shared copy, served to an anonymous client.
func TestEchoCredentialsAreJudgedAsTheRequestCame(t *testing.T) {
	sw := &onOff{}
	cache, err := middleware.NewStaleCache(8, time.Minute, 1024, middleware.StaleShared())
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(sw), sluice.WithClock(sluice.NewManualClock(time.Hour)), sluice.WithFallback(cache))
	require.NoError(t, err)
	defer g.Close()
	e := echo.New()
	e.Use(mw(t, WithGuard(g)))
	e.GET("/me", func(c echo.Context) error {
		user := strings.TrimPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
		c.Request().Header.Del("Authorization")
		if user == "" {
			user = "anonymous"
		}
		return c.String(http.StatusOK, "account of "+user)
	})
	r := httptest.NewRequest(http.MethodGet, "/me", nil)
	r.Header.Set("Authorization", "Bearer alice")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, r)
	require.Equal(t, "account of alice", rec.Body.String())

	sw.on = true
	r = httptest.NewRequest(http.MethodGet, "/me", nil)
	r.RemoteAddr = "198.51.100.9:2000"
	rec = httptest.NewRecorder()
	e.ServeHTTP(rec, r)
	assert.NotEqual(t, "account of alice", rec.Body.String(), "an anonymous client is served alice's account")
}
