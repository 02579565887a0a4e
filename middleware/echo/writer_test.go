package sluiceecho

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A classifier that panics on the 5xx held back for the fallback: the held
// status still goes out, as for any panic while a 5xx is held (Echo's
// Response took it as written, so an outer Recover writes nothing): the
// client never gets an empty 200.
func TestAPanickingClassifierOnAHeld5xxIsNoEmpty200(t *testing.T) {
	fb, err := degrade.New(degrade.OnError(answering("fallback")))
	require.NoError(t, err)
	g := mustManualGuard(t, sluice.WithFallback(fb))
	e := echo.New()
	e.Logger.SetOutput(io.Discard)
	e.Use(echomw.Recover())
	e.Use(mw(t, WithGuard(g), WithClassifier(func(status int) sluice.Outcome {
		if status >= 500 {
			panic("classifier bug")
		}
		return sluice.Success
	})))
	e.GET("/a", func(c echo.Context) error {
		return c.String(http.StatusBadGateway, "upstream down")
	})
	rec := do(e, http.MethodGet, "/a")
	assert.Equal(t, http.StatusBadGateway, rec.Code, "body %q", rec.Body.String())
}

// A status written past Echo's Response (c.Response().Writer) is the one
// the client got, also when the body then goes through c.Response(), which
// commits Echo's default 200: the 404 counts for nothing and is no stale
// copy for a later failure to serve as a 200.
func TestAStatusWrittenPastEchoThenABodyThroughItIsNoStaleCopy(t *testing.T) {
	sc, err := middleware.NewStaleCache(8, time.Hour, 1<<10, middleware.StaleShared())
	require.NoError(t, err)
	c := testpolicy.NewCounter()
	g, err := sluice.New(sluice.With(c), sluice.WithFallback(sc), sluice.WithClock(sluice.NewManualClock(0)))
	require.NoError(t, err)
	e := echo.New()
	e.Logger.SetOutput(io.Discard)
	e.Use(mw(t, WithGuard(g)))
	fail := false
	e.GET("/a", func(ec echo.Context) error {
		if fail {
			return errors.New("database down")
		}
		ec.Response().Writer.WriteHeader(http.StatusNotFound)
		_, err := fmt.Fprint(ec.Response(), "no such item")
		return err
	})
	rec := do(e, http.MethodGet, "/a")
	require.Equal(t, http.StatusNotFound, rec.Code)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, c.Outcomes(), "a 404 is Ignored, not a Success")
	fail = true
	rec = do(e, http.MethodGet, "/a")
	assert.NotEqual(t, "no such item", rec.Body.String(), "the 404's body was served as the stale 200 (status %d)", rec.Code)
}

// stringNopWriter is a ResponseWriter that keeps nothing and takes strings
// as net/http's own writer does (io.StringWriter).
type stringNopWriter struct{ nopWriter }

func (w *stringNopWriter) WriteString(s string) (int, error) { return len(s), nil }

var stringBody = strings.Repeat("x", 64)

// The middleware's writer under c.Response() keeps the io.StringWriter of
// the writer beneath: a handler writing io.WriteString(c.Response().Writer,
// s) pays no []byte copy of s.
func TestWriteStringPastEchoAddsNoAllocation(t *testing.T) {
	g := newGuard(t)
	h := func(c echo.Context) error {
		_, err := io.WriteString(c.Response().Writer, stringBody)
		return err
	}
	passThrough := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return next(c) }
	}
	bare := echo.New()
	bare.GET("/", h, passThrough)
	guarded := echo.New()
	guarded.GET("/", h, mw(t, WithGuard(g)))
	measure := func(e *echo.Echo) float64 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		w := &stringNopWriter{nopWriter{h: http.Header{}}}
		return testing.AllocsPerRun(200, func() { e.ServeHTTP(w, req) })
	}
	slack := 0.0
	if raceEnabled {
		slack = 1
	}
	base, got := measure(bare), measure(guarded)
	assert.LessOrEqual(t, got-base, slack, "allocs/op: bare %v, guarded %v", base, got)
}
