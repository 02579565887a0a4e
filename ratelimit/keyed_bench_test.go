package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// BenchmarkGuardKeyed is a request through a Guard with a Keyed of token
// buckets, its key already held and with quota to spare. "admit-only" keys
// limiters that have the Policy methods alone, without DecideAt.
func BenchmarkGuardKeyed(b *testing.B) {
	ctx := sluice.WithKey(context.Background(), "203.0.113.7")
	fn := func(context.Context) error { return nil }
	for _, c := range []struct {
		name string
		new  func(string) (sluice.Policy, error)
	}{
		{"fast", func(string) (sluice.Policy, error) { return NewTokenBucket(Every(time.Nanosecond), 1<<30) }},
		{"admit-only", func(string) (sluice.Policy, error) {
			tb, err := NewTokenBucket(Every(time.Nanosecond), 1<<30)
			return admitOnly{tb}, err
		}},
	} {
		k := mustKeyed(b, c.new)
		g, err := sluice.New(sluice.With(k))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = g.Do(ctx, fn)
			}
		})
	}
}

// admitOnly hides all but a policy's Policy methods: a limiter written
// elsewhere, without the DecideAt and AllowNAt of this package's.
type admitOnly struct{ sluice.Policy }
