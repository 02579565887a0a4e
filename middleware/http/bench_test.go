package sluicehttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/ratelimit"
)

// BenchmarkMiddleware measures the middleware alone as a server runs it: a
// fresh writer (and header map) per request that keeps nothing, a handler
// that does nothing, and a Guard with a token bucket that
// never runs dry and a closed breaker. "guard-alone" is that Guard's Begin and
// Report without HTTP, so the difference is what the middleware adds.
func BenchmarkMiddleware(b *testing.B) {
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1_000_000_000), 1_000_000_000)
	if err != nil {
		b.Fatal(err)
	}
	br, err := breaker.New("bench")
	if err != nil {
		b.Fatal(err)
	}
	g, err := sluice.New(sluice.With(tb, br))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("guard-alone", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			var call sluice.Call
			_ = g.Begin(ctx, &call)
			call.Report(sluice.Success, nil)
		}
	})
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for _, c := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", next},
		{"sluice", mw(b, WithGuard(g))(next)},
		{"sluice-quiet", mw(b, WithGuard(g), WithRenderer(middlewareQuiet()))(next)},
	} {
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			b.ReportAllocs()
			for b.Loop() {
				c.h.ServeHTTP(&nopWriter{h: http.Header{}}, req)
			}
		})
	}
}
