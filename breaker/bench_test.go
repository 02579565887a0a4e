package breaker_test

import (
	"context"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
)

func nop(context.Context) error { return nil }

// benchGuard measures a request through a Guard whose chain is p alone.
func benchGuard(b *testing.B, ctx context.Context, p sluice.Policy) {
	g, err := sluice.New(sluice.With(p))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = g.Do(ctx, nop)
	}
}

// BenchmarkGuardAdaptive is a request through a Guard with an adaptive
// throttle whose dependency accepts everything.
func BenchmarkGuardAdaptive(b *testing.B) {
	a, err := breaker.NewAdaptive("bench")
	if err != nil {
		b.Fatal(err)
	}
	benchGuard(b, context.Background(), a)
}

// BenchmarkGuardGroup is a request through a Guard with a Group, its key's
// breaker closed.
func BenchmarkGuardGroup(b *testing.B) {
	g, err := breaker.NewGroup("bench")
	if err != nil {
		b.Fatal(err)
	}
	benchGuard(b, sluice.WithResource(context.Background(), "GET /items"), g)
}
