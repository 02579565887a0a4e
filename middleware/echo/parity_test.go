package sluiceecho

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/middleware"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

// An inner middleware rewrites the request's path (as a prefix-stripping
// or rewriting middleware does): the good response is kept under the
// request as it came, where a rejection of the handler's own call and the
// handler's failure alike find it.
func TestAFailureFindsTheStaleCopyKeptForTheRequestAsItCame(t *testing.T) {
	sc, err := middleware.NewStaleCache(8, time.Hour, 1<<10, middleware.StaleShared())
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithGuard(mustManualGuard(t, sluice.WithFallback(sc)))))
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request().Clone(c.Request().Context())
			r.URL.Path = "/internal" + r.URL.Path
			c.SetRequest(r)
			return next(c)
		}
	})
	fail := false
	e.GET("/a", func(c echo.Context) error {
		if fail {
			return errors.New("database down")
		}
		return c.String(http.StatusOK, "good")
	})
	require.Equal(t, "good", do(e, http.MethodGet, "/a").Body.String())
	fail = true
	rec := do(e, http.MethodGet, "/a")
	assert.Equal(t, "good", rec.Body.String(), "status %d", rec.Code)
}

// A handler that set the fields of the body it meant to send (an ETag, a
// Content-Encoding, Last-Modified) and then returns a rejection its own
// call met: the problem answer carries none of them, as net/http's Reject's
// does (not a JSON body labelled gzip, with the handler's validator).
func TestAHandlerRejectionDropsTheHandlersBodyFieldsAsNetHTTPDoes(t *testing.T) {
	inner := testpolicy.MustGuard(t, testpolicy.Reject(sluice.ErrCircuitOpen, time.Second))
	set := func(h http.Header) {
		h.Set("ETag", `"v1"`)
		h.Set("Content-Encoding", "gzip")
		h.Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
	}
	hm, err := sluicehttp.Middleware(sluicehttp.WithGuard(newGuard(t)))
	require.NoError(t, err)
	hh := hm(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		set(w.Header())
		err := inner.Do(r.Context(), func(context.Context) error { return nil })
		if !sluicehttp.Reject(w, r, err) {
			_, _ = io.WriteString(w, "ok")
		}
	}))
	hrec := httptest.NewRecorder()
	hh.ServeHTTP(hrec, httptest.NewRequest(http.MethodGet, "/a", nil))
	require.Equal(t, http.StatusServiceUnavailable, hrec.Code)
	require.Empty(t, hrec.Header().Get("Content-Encoding"))

	e := echo.New()
	e.Use(mw(t, WithGuard(newGuard(t))))
	e.GET("/a", func(c echo.Context) error {
		set(c.Response().Header())
		return inner.Do(c.Request().Context(), func(context.Context) error { return nil })
	})
	rec := do(e, http.MethodGet, "/a")
	require.Equal(t, hrec.Code, rec.Code)
	for _, f := range []string{"Etag", "Content-Encoding", "Last-Modified"} {
		assert.Equal(t, hrec.Header().Get(f), rec.Header().Get(f), "field %s", f)
	}
}

// mustManualGuard returns a Guard of opts on a manual clock.
func mustManualGuard(t *testing.T, opts ...sluice.Option) *sluice.Guard {
	t.Helper()
	g, err := sluice.New(append([]sluice.Option{sluice.WithClock(sluice.NewManualClock(0))}, opts...)...)
	require.NoError(t, err)
	return g
}

// A handler that writes nothing by the Guard's deadline is answered as the
// net/http adapter answers it: by the Guard's fallback for a timeout, not
// with an empty 200; without one, as the handler left it.
func TestNothingWrittenByTheDeadlineIsAnsweredAsNetHTTPDoes(t *testing.T) {
	for _, withFallback := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			opts := []sluice.Option{sluice.WithTimeout(100 * time.Millisecond)}
			if withFallback {
				fb, err := degrade.New(degrade.OnTimeout(answering("fallback")))
				require.NoError(t, err)
				opts = append(opts, sluice.WithFallback(fb))
			}
			hm, err := sluicehttp.Middleware(sluicehttp.WithGuard(mustManualGuard(t, opts...)))
			require.NoError(t, err)
			hh := hm(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
			hrec := httptest.NewRecorder()
			hh.ServeHTTP(hrec, httptest.NewRequest(http.MethodGet, "/a", nil))

			e := echo.New()
			e.Use(mw(t, WithGuard(mustManualGuard(t, opts...))))
			e.GET("/a", func(c echo.Context) error { <-c.Request().Context().Done(); return nil })
			rec := do(e, http.MethodGet, "/a")
			assert.Equal(t, hrec.Code, rec.Code, "fallback %v", withFallback)
			assert.Equal(t, hrec.Body.String(), rec.Body.String(), "fallback %v", withFallback)
			if withFallback {
				assert.Equal(t, "fallback", rec.Body.String())
			}
		})
	}
}
