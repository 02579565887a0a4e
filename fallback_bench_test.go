package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// fbNop admits everything and remembers nothing.
type fbNop struct{}

func (fbNop) Name() string { return "nop" }
func (fbNop) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1}, nil
}
func (fbNop) Needs() sluice.Needs                                              { return 0 }
func (fbNop) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

// BenchmarkGuardDoWithFallback is the success path of a Guard with one no-op
// policy, without and with fallbacks declared: the fallback layer must cost
// next to nothing when the call succeeds.
func BenchmarkGuardDoWithFallback(b *testing.B) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	fnv := func(context.Context) (int, error) { return 1, nil }
	for _, c := range []struct {
		name string
		opts []sluice.Option
	}{
		{"without", nil},
		{"with", []sluice.Option{
			sluice.WithFallback(fbValue("a", "x"), fbValue("b", 2)),
			sluice.OnFallback(func(context.Context, sluice.FallbackEvent) {}),
		}},
	} {
		g, err := sluice.New(append([]sluice.Option{sluice.With(fbNop{})}, c.opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("Do/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = g.Do(ctx, fn)
			}
		})
		b.Run("Execute/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = sluice.Execute(ctx, g, fnv)
			}
		})
		b.Run("Do-parallel/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_ = g.Do(ctx, fn)
				}
			})
		})
	}
}

// BenchmarkGuardFallbackServes is the rejection path answered by a
// fallback.
func BenchmarkGuardFallbackServes(b *testing.B) {
	g, err := sluice.New(sluice.With(&fbPolicy{name: "limiter", cause: sluice.ErrRateLimited}),
		sluice.WithFallback(fbValue("default", 2)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	fnv := func(context.Context) (int, error) { return 1, nil }
	b.ReportAllocs()
	for b.Loop() {
		_, _ = sluice.Execute(ctx, g, fnv)
	}
}

// BenchmarkGuardDoWithTimeout is the success path of a Guard with a call
// timeout: the deadline's context and timer are its cost.
func BenchmarkGuardDoWithTimeout(b *testing.B) {
	g, err := sluice.New(sluice.With(fbNop{}), sluice.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		_ = g.Do(ctx, fn)
	}
}
