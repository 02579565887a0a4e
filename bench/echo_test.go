package bench

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"
	"golang.org/x/time/rate"

	"github.com/sluice-go/sluice/middleware"
	sluiceecho "github.com/sluice-go/sluice/middleware/echo"
)

// echoServers returns an Echo per contender, each serving GET / with the
// same handler: bare, behind sluice's middleware (a token bucket and a
// breaker; quiet: without the RateLimit fields on admitted responses;
// keyed-ip: a token bucket per client address), and behind Echo's own
// RateLimiter (a token bucket per client address in its memory store).
func echoServers(tb testing.TB) []struct {
	name string
	e    *echo.Echo
} {
	handler := func(c echo.Context) error { return c.JSONBlob(http.StatusOK, []byte(`{"ok":true}`)) }
	newEcho := func(mw ...echo.MiddlewareFunc) *echo.Echo {
		e := echo.New()
		e.Use(mw...)
		e.GET("/", handler)
		return e
	}
	g := limiterBreakerGuard(tb)
	kg, keyer := keyedByIP(tb)
	store := echomw.NewRateLimiterMemoryStoreWithConfig(echomw.RateLimiterMemoryStoreConfig{
		Rate: rate.Limit(1_000_000_000), Burst: 1_000_000_000, ExpiresIn: 3 * time.Minute,
	})
	return []struct {
		name string
		e    *echo.Echo
	}{
		{"bare", newEcho()},
		{"sluice", newEcho(echoMW(tb, sluiceecho.WithGuard(g)))},
		{"sluice-quiet", newEcho(echoMW(tb, sluiceecho.WithGuard(g),
			sluiceecho.WithRenderer(middleware.Renderer{QuietAdmitted: true})))},
		{"sluice-keyed-ip", newEcho(echoMW(tb, sluiceecho.WithGuard(kg), sluiceecho.WithKeyer(keyer)))},
		{"echo-ratelimiter", newEcho(echomw.RateLimiter(store))},
	}
}

// BenchmarkEcho measures one GET through each Echo under httptest, a fresh
// ResponseRecorder per request.
func BenchmarkEcho(b *testing.B) {
	for _, c := range echoServers(b) {
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			b.ReportAllocs()
			for b.Loop() {
				c.e.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				for pb.Next() {
					c.e.ServeHTTP(httptest.NewRecorder(), req)
				}
			})
		})
	}
}

// TestEchoServersAnswer keeps the benchmark's set-up honest: every Echo
// admits and answers 200.
func TestEchoServersAnswer(t *testing.T) {
	for _, c := range echoServers(t) {
		rec := httptest.NewRecorder()
		c.e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != http.StatusOK || rec.Body.String() != `{"ok":true}` {
			t.Errorf("%s: %d %q", c.name, rec.Code, rec.Body.String())
		}
	}
}

// BenchmarkEchoOverhead measures the same Echos with a reused writer (as
// BenchmarkHTTPOverhead does): the difference from "bare" is the middleware's
// own cost, sluice's and Echo's RateLimiter's side by side.
func BenchmarkEchoOverhead(b *testing.B) {
	for _, c := range echoServers(b) {
		b.Run(c.name, func(b *testing.B) { serveReused(b, c.e) })
	}
}

// echoMW is sluiceecho.Middleware(opts...), which must not fail.
func echoMW(tb testing.TB, opts ...sluiceecho.Option) echo.MiddlewareFunc {
	tb.Helper()
	m, err := sluiceecho.Middleware(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}
