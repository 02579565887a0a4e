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

func BenchmarkShedder(b *testing.B) {
	s, err := adaptive.NewShedder()
	if err != nil {
		b.Fatal(err)
	}
	benchPolicy(b, s)
}

func BenchmarkBulkhead(b *testing.B) {
	l, err := adaptive.NewBulkhead(1 << 20)
	if err != nil {
		b.Fatal(err)
	}
	benchPolicy(b, l)
}

func BenchmarkThroughGuard(b *testing.B) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	for _, c := range []struct {
		name string
		new  func() (sluice.Policy, error)
	}{
		{"shedder", func() (sluice.Policy, error) { return adaptive.NewShedder() }},
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
