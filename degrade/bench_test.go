package degrade_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
)

// BenchmarkFallbacks is the cost of choosing and calling a declared
// fallback for a rejection, without the Guard around it.
func BenchmarkFallbacks(b *testing.B) {
	fb, err := degrade.New(
		degrade.OnRateLimited(degrade.Value("rl")),
		degrade.OnRejected(degrade.Value("rejected")),
		degrade.OnError(degrade.Value("error")),
	)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		err  error
	}{
		{"by-cause", sluice.Rejection(sluice.Decision{Limit: -1, Cause: sluice.ErrRateLimited})},
		{"rejected", sluice.Rejection(sluice.Decision{Limit: -1, Cause: sluice.ErrCircuitOpen})},
		{"error", errBoom},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _, _ = fb.AnswerValue(ctx, c.err)
			}
		})
	}
}

// BenchmarkStaleExecute is a call through Stale.Execute: remembering a
// fresh answer, and serving a stale one for a failed call.
func BenchmarkStaleExecute(b *testing.B) {
	s, err := degrade.NewStale[string](time.Hour, 1024)
	if err != nil {
		b.Fatal(err)
	}
	g, err := sluice.New()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = s.Execute(ctx, g, "k", answer("v"))
		}
	})
	b.Run("stale", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = s.Execute(ctx, g, "k", fail)
		}
	})
}

// BenchmarkGuardShed is a request through a Guard with a Shed whose switch
// is off.
func BenchmarkGuardShed(b *testing.B) {
	sw, err := degrade.NewSwitch("extras")
	if err != nil {
		b.Fatal(err)
	}
	p, err := degrade.NewShed(sw, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	g, err := sluice.New(sluice.With(p))
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
