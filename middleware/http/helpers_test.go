package sluicehttp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/ratelimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mw is mw(t, opts...), which must not fail.
func mw(t testing.TB, opts ...Option) func(http.Handler) http.Handler {
	t.Helper()
	m, err := Middleware(opts...)
	require.NoError(t, err)
	return m
}

func newGuard(t testing.TB, clock sluice.Clock, ps ...sluice.Policy) *sluice.Guard {
	t.Helper()
	g, err := sluice.New(sluice.With(ps...), sluice.WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func newBreaker(t testing.TB, failures int, open time.Duration) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New("test", breaker.WithConsecutiveFailures(failures), breaker.WithOpenDuration(open))
	require.NoError(t, err)
	return b
}

func newWindow(t testing.TB, limit int64, window time.Duration) *ratelimit.FixedWindow {
	t.Helper()
	fw, err := ratelimit.NewFixedWindow(limit, window, ratelimit.WithName("ratelimit/test"))
	require.NoError(t, err)
	return fw
}

func statusHandler(code int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte("body"))
	})
}

func serve(h http.Handler, method, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader("")))
	return rec
}

func middlewareQuiet() middleware.Renderer { return middleware.Renderer{QuietAdmitted: true} }
