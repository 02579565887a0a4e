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
	echomw "github.com/labstack/echo/v4/middleware"
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
// with an empty 200; without one, with 504 Gateway Timeout.
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
			} else {
				assert.Equal(t, http.StatusGatewayTimeout, rec.Code, "the timeout counted, not an empty 200")
			}
		})
	}
}

// A handler that answers 500 itself, through c.Response() or past it
// through c.Response().Writer, while the Guard declares a fallback for
// failures: the fallback answers, as in the net/http adapter, the failure
// is counted, and Echo's Response tells what the client got.
func TestAWritten5xxIsAnsweredByTheFallbackAsNetHTTPDoes(t *testing.T) {
	fallbackGuard := func(c *testpolicy.Counter) *sluice.Guard {
		fb, err := degrade.New(degrade.OnError(answering("fallback")))
		require.NoError(t, err)
		g, err := sluice.New(sluice.With(c), sluice.WithFallback(fb))
		require.NoError(t, err)
		return g
	}
	hc := testpolicy.NewCounter()
	hm, err := sluicehttp.Middleware(sluicehttp.WithGuard(fallbackGuard(hc)))
	require.NoError(t, err)
	hh := hm(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "database down")
	}))
	hrec := httptest.NewRecorder()
	hh.ServeHTTP(hrec, httptest.NewRequest(http.MethodGet, "/a", nil))
	require.Equal(t, "fallback", hrec.Body.String())

	for name, h := range map[string]echo.HandlerFunc{
		"Response": func(c echo.Context) error {
			c.Response().Header().Set("ETag", `"v1"`)
			return c.String(http.StatusInternalServerError, "database down")
		},
		"Writer": func(c echo.Context) error {
			w := c.Response().Writer
			w.Header().Set("ETag", `"v1"`)
			w.WriteHeader(http.StatusInternalServerError)
			_, err := io.WriteString(w, "database down")
			return err
		},
	} {
		ec := testpolicy.NewCounter()
		e := echo.New()
		var status int
		var size int64
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				err := next(c)
				status, size = c.Response().Status, c.Response().Size
				return err
			}
		})
		e.Use(mw(t, WithGuard(fallbackGuard(ec))))
		e.GET("/a", h)
		rec := do(e, http.MethodGet, "/a")
		assert.Equal(t, hrec.Code, rec.Code, name)
		assert.Equal(t, hrec.Body.String(), rec.Body.String(), name)
		assert.Equal(t, hrec.Header().Get("ETag"), rec.Header().Get("ETag"), name)
		assert.Equal(t, hc.Outcomes(), ec.Outcomes(), name)
		assert.Equal(t, rec.Code, status, "%s: the status Echo's Response tells", name)
		assert.Equal(t, int64(rec.Body.Len()), size, "%s: the size Echo's Response tells", name)
	}
}

// A status written past Echo's Response, through c.Response().Writer, is
// the one the request is classified by, and a 404 so written is no good
// response to keep as a stale copy.
func TestAStatusWrittenPastEchosResponseCounts(t *testing.T) {
	c := testpolicy.NewCounter()
	sc, err := middleware.NewStaleCache(8, time.Hour, 1<<10, middleware.StaleShared())
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(c), sluice.WithFallback(sc))
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithGuard(g)))
	status := http.StatusNotFound
	e.GET("/a", func(ec echo.Context) error {
		if status == 0 {
			return errors.New("database down")
		}
		w := ec.Response().Writer
		w.WriteHeader(status)
		_, err := io.WriteString(w, http.StatusText(status))
		return err
	})
	require.Equal(t, http.StatusNotFound, do(e, http.MethodGet, "/a").Code)
	status = http.StatusInternalServerError
	require.Equal(t, http.StatusInternalServerError, do(e, http.MethodGet, "/a").Code)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1, sluice.Failure: 1}, c.Outcomes())
	status = 0 // a failure: no stale copy of the 404 answers it
	rec := do(e, http.MethodGet, "/a")
	assert.Equal(t, http.StatusInternalServerError, rec.Code, rec.Body.String())
}

// A 5xx held back for a fallback goes out, without its body, when the
// handler then panics, and a flush while it is held sends nothing: the
// client never gets an empty 200 in its place.
func TestAHeld5xxIsNeverLostToAnEmpty200(t *testing.T) {
	fb, err := degrade.New(degrade.OnError(answering("fallback")))
	require.NoError(t, err)
	g := mustManualGuard(t, sluice.WithFallback(fb))
	e := echo.New()
	e.Use(echomw.Recover())
	e.Use(mw(t, WithGuard(g)))
	e.GET("/panic", func(c echo.Context) error {
		_ = c.String(http.StatusBadGateway, "upstream down")
		panic("after the answer")
	})
	e.GET("/flush", func(c echo.Context) error {
		c.Response().WriteHeader(http.StatusServiceUnavailable)
		c.Response().Flush()
		return nil
	})
	rec := do(e, http.MethodGet, "/panic")
	assert.Equal(t, http.StatusBadGateway, rec.Code)
	assert.Empty(t, rec.Body.String())
	rec = do(e, http.MethodGet, "/flush")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "fallback", rec.Body.String())
	assert.False(t, rec.Flushed, "a held status was flushed")
}
