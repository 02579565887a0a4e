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
			d, t := admit(p, ctx, now)
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
				d, t := admit(p, ctx, now)
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

// BenchmarkThroughGuard is a request through a sluice.Guard whose chain is
// one of this package's policies, with room to spare.
func BenchmarkThroughGuard(b *testing.B) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	for _, c := range []struct {
		name string
		new  func() (sluice.Policy, error)
	}{
		{"bbr", func() (sluice.Policy, error) {
			return adaptive.NewGuard(adaptive.WithSampler(adaptive.NewManualSampler(0.5, 0)))
		}},
		{"bbr-cpu-high", func() (sluice.Policy, error) {
			return adaptive.NewGuard(adaptive.WithSampler(adaptive.NewManualSampler(0.95, 0)))
		}},
		{"concurrency", func() (sluice.Policy, error) { return adaptive.NewConcurrencyLimit() }},
		{"bulkhead", func() (sluice.Policy, error) { return adaptive.NewBulkhead(1 << 20) }},
	} {
		p, err := c.new()
		if err != nil {
			b.Fatal(err)
		}
		g, err := sluice.New(sluice.With(p))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = g.Do(ctx, fn)
			}
		})
		_ = g.Close()
	}
}
