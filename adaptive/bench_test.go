package adaptive_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
)

// The side-by-side rows with peer libraries live in the bench module; these
// measure the policies alone, as a Guard runs them.

func benchPolicy(b *testing.B, p sluice.Policy) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		now := time.Second
		for b.Loop() {
			now += time.Microsecond
			d, t := p.Admit(ctx, now)
			if d.Allowed {
				p.Done(t, sluice.Success, now, time.Millisecond)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			now := time.Second
			for pb.Next() {
				now += time.Microsecond
				d, t := p.Admit(ctx, now)
				if d.Allowed {
					p.Done(t, sluice.Success, now, time.Millisecond)
				}
			}
		})
	})
}

func BenchmarkGuard(b *testing.B) {
	g, err := adaptive.NewGuard(adaptive.WithSampler(adaptive.NewManualSampler(0.5, 0)))
	if err != nil {
		b.Fatal(err)
	}
	benchPolicy(b, g)
}

func BenchmarkGuardCPUHigh(b *testing.B) {
	g, err := adaptive.NewGuard(adaptive.WithSampler(adaptive.NewManualSampler(0.95, 0)))
	if err != nil {
		b.Fatal(err)
	}
	benchPolicy(b, g)
}

func BenchmarkConcurrencyLimit(b *testing.B) {
	l, err := adaptive.NewConcurrencyLimit()
	if err != nil {
		b.Fatal(err)
	}
	benchPolicy(b, l)
}

func BenchmarkBulkhead(b *testing.B) {
	l, err := adaptive.NewBulkhead(1 << 20)
	if err != nil {
		b.Fatal(err)
	}
	benchPolicy(b, l)
}
