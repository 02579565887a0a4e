package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// nopPolicy admits everything and remembers nothing: what is left to measure
// is the Guard's own cost.
type nopPolicy struct{}

func (nopPolicy) Name() string { return "nop" }
func (nopPolicy) Admit(context.Context, time.Duration) (sluice.Decision, sluice.Ticket) {
	return sluice.Decision{Allowed: true, Policy: "nop", Limit: -1}, 0
}
func (nopPolicy) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

func nop(context.Context) error { return nil }

// fastNop is nopPolicy with the fast form every limiter and breaker of
// sluice has.
type fastNop struct{ nopPolicy }

func (fastNop) AdmitFast(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, *sluice.RejectedError) {
	return 0, sluice.Quota{Limit: -1}, nil
}

// FastOf returns p itself, the owner of its AdmitFast (see FastPolicy).
func (p fastNop) FastOf() sluice.Policy { return p }

// BenchmarkGuardDo is a request through a Guard with one no-op policy: two
// monotonic clock reads plus the chain's bookkeeping. "serial" and
// "parallel" use a no-op with AdmitFast, the form of every limiter and
// breaker of sluice; "admit-only" and "admit-only-parallel" one with Admit
// alone, as a policy written elsewhere may be, which adds the cost of
// returning its Decision through memory.
func BenchmarkGuardDo(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		p    sluice.Policy
	}{{"", fastNop{}}, {"admit-only", nopPolicy{}}} {
		g, err := sluice.New(sluice.With(c.p))
		if err != nil {
			b.Fatal(err)
		}
		serial, parallel := "serial", "parallel"
		if c.name != "" {
			serial, parallel = c.name, c.name+"-parallel"
		}
		b.Run(serial, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = g.Do(ctx, nop)
			}
		})
		b.Run(parallel, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_ = g.Do(ctx, nop)
				}
			})
		})
	}
}

// BenchmarkGuardAdmit is the two-step form: Admit, which returns the
// Decision and the Done, and AdmitTo, which the adapters use, writing them
// in place.
func BenchmarkGuardAdmit(b *testing.B) {
	g, err := sluice.New(sluice.With(nopPolicy{}))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("Admit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, done, _ := g.Admit(ctx)
			done.Finish(nil)
		}
	})
	b.Run("AdmitTo", func(b *testing.B) {
		b.ReportAllocs()
		var d sluice.Decision
		var done sluice.Done
		for b.Loop() {
			_ = g.AdmitTo(ctx, &d, &done)
			done.Finish(nil)
		}
	})
}

// BenchmarkClock is the floor under every Guard: one monotonic read.
func BenchmarkClock(b *testing.B) {
	b.Run("sluice.Now", func(b *testing.B) {
		for b.Loop() {
			_ = sluice.Now()
		}
	})
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
}

func TestGuardDoAllocatesNothing(t *testing.T) {
	g, err := sluice.New(sluice.With(nopPolicy{}, nopPolicy{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n := testing.AllocsPerRun(200, func() { _ = g.Do(ctx, nop) }); n != 0 {
		t.Fatalf("Guard.Do allocates %v times per call, want 0", n)
	}
	if n := testing.AllocsPerRun(200, func() {
		_, _ = sluice.Execute(ctx, g, func(context.Context) (int, error) { return 1, nil })
	}); n != 0 {
		t.Fatalf("Execute allocates %v times per call, want 0", n)
	}
}
