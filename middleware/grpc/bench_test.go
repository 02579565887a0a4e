package sluicegrpc

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/ratelimit"
	"google.golang.org/grpc"
)

// benchGuard is a token bucket far above the benchmark's rate and a closed
// breaker: every call is admitted.
func benchGuard(b *testing.B) *sluice.Guard {
	tbk, err := ratelimit.NewTokenBucket(ratelimit.Rate{Count: 1_000_000_000, Period: time.Second}, 1_000_000_000)
	if err != nil {
		b.Fatal(err)
	}
	br, err := breaker.New("bench")
	if err != nil {
		b.Fatal(err)
	}
	return mustGuard(b, sluice.With(tbk, br))
}

// BenchmarkUnaryServer measures what the interceptor adds to the Guard it
// runs: "guard" is the Guard's Begin and End alone.
func BenchmarkUnaryServer(b *testing.B) {
	ctx := context.Background()
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	ok := func(context.Context, any) (any, error) { return nil, nil }
	b.Run("guard", func(b *testing.B) {
		g := benchGuard(b)
		b.ReportAllocs()
		for b.Loop() {
			var call sluice.Call
			err := g.Begin(ctx, &call)
			if err == nil {
				_, err = ok(call.Context(), nil)
			}
			_ = call.End(err)
		}
	})
	b.Run("interceptor", func(b *testing.B) {
		i := unary(b, WithGuard(benchGuard(b)))
		b.ReportAllocs()
		for b.Loop() {
			_, _ = i(ctx, nil, info, ok)
		}
	})
}
