package sluice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/ratelimit"
)

// nopPolicy admits everything and remembers nothing: what is left to measure
// is the Guard's own cost. Two of one name are the same policy.
type nopPolicy struct{ name string }

func (p nopPolicy) Name() string { return "nop" + p.name }
func (nopPolicy) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1}, nil
}
func (nopPolicy) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (nopPolicy) Needs() sluice.Needs                                              { return 0 }

func nop(context.Context) error { return nil }

// BenchmarkGuardDo is a request through a Guard with one no-op policy: a
// monotonic clock read plus the chain's bookkeeping; "timed" with a policy
// that needs the end of the call, which adds the second read.
func BenchmarkGuardDo(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		p    sluice.Policy
	}{{"", nopPolicy{}}, {"timed", timedNop{}}} {
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

// timedNop is nopPolicy needing the end of each call.
type timedNop struct{ nopPolicy }

func (timedNop) Needs() sluice.Needs { return sluice.NeedsEnd }

// BenchmarkGuardBegin is the two-step form the adapters use: Begin, which
// returns the Call with its Decision, and End.
func BenchmarkGuardBegin(b *testing.B) {
	g, err := sluice.New(sluice.With(nopPolicy{}))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		var c sluice.Call
		err := g.Begin(ctx, &c)
		_ = c.End(err)
	}
}

// BenchmarkGuardReject is the rejection path of Do: an open breaker, and a
// rate limiter whose quota is spent.
func BenchmarkGuardReject(b *testing.B) {
	ctx := context.Background()
	for name, g := range map[string]*sluice.Guard{"breaker": openBreakerGuard(b), "ratelimit": spentLimiterGuard(b)} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = g.Do(ctx, nop)
			}
		})
	}
}

func openBreakerGuard(t testing.TB) *sluice.Guard {
	br, err := breaker.New("dep", breaker.WithOpenDuration(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	br.OpenFor(context.Background(), monoclock.Now(), time.Hour)
	g, err := sluice.New(sluice.With(br))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Do(context.Background(), nop); !errors.Is(err, sluice.ErrCircuitOpen) {
		t.Fatalf("the breaker is not open: %v", err)
	}
	return g
}

func spentLimiterGuard(t testing.TB) *sluice.Guard {
	// One call an hour: the quota, spent once, stays spent for the test.
	l, err := ratelimit.NewTokenBucket(ratelimit.Every(time.Hour), 1)
	if err != nil {
		t.Fatal(err)
	}
	g, err := sluice.New(sluice.With(l))
	if err != nil {
		t.Fatal(err)
	}
	_ = g.Do(context.Background(), nop)
	if err := g.Do(context.Background(), nop); !errors.Is(err, sluice.ErrRateLimited) {
		t.Fatalf("the limiter admits: %v", err)
	}
	return g
}

// A flood of rejections allocates nothing: a Guard shares one error among
// the rejections of a policy whose answers agree.
func TestGuardRejectionAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	overloaded, err := sluice.New(sluice.With(shedAll{}))
	if err != nil {
		t.Fatal(err)
	}
	for name, g := range map[string]*sluice.Guard{"open breaker": openBreakerGuard(t), "spent rate limiter": spentLimiterGuard(t), "overloaded": overloaded} {
		var err error
		if n := testing.AllocsPerRun(1000, func() { err = g.Do(ctx, nop) }); n != 0 {
			t.Errorf("%s: a rejection by Do allocates %v times, want 0", name, n)
		}
		if sluice.CauseOf(err) == sluice.CauseNone {
			t.Errorf("%s: %v is no rejection", name, err)
		}
		if n := testing.AllocsPerRun(1000, func() {
			var c sluice.Call
			err := g.Begin(ctx, &c)
			_ = c.End(err)
		}); n != 0 {
			t.Errorf("%s: a rejection by Begin allocates %v times, want 0", name, n)
		}
		if n := testing.AllocsPerRun(1000, func() {
			_, err = sluice.Execute(ctx, g, func(context.Context) (int, error) { return 1, nil })
		}); n != 0 {
			t.Errorf("%s: a rejection by Execute allocates %v times, want 0", name, n)
		}
		if sluice.CauseOf(err) == sluice.CauseNone {
			t.Errorf("%s: Execute: %v is no rejection", name, err)
		}
	}
}

// shedAll rejects every call as an overloaded service does.
type shedAll struct{ nopPolicy }

func (shedAll) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1, RetryAfter: time.Second}, sluice.ErrOverloaded
}

// BenchmarkClock is the floor under every Guard: one monotonic read.
func BenchmarkClock(b *testing.B) {
	b.Run("SystemClock", func(b *testing.B) {
		for b.Loop() {
			_ = sluice.SystemClock.Now()
		}
	})
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
}

func TestGuardDoAllocatesNothing(t *testing.T) {
	g, err := sluice.New(sluice.With(nopPolicy{"a"}, nopPolicy{"b"}))
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
	if n := testing.AllocsPerRun(200, func() {
		var c sluice.Call
		err := g.Begin(ctx, &c)
		if err == nil {
			err = nop(c.Context())
		}
		_ = c.End(err)
	}); n != 0 {
		t.Fatalf("Begin and End allocate %v times per call, want 0", n)
	}
}

// waitingNop admits at once, but declares that it may wait, as a queued
// concurrency limit does: a Guard then keeps each policy's admission instant.
type waitingNop struct{ nopPolicy }

func (waitingNop) Needs() sluice.Needs { return sluice.Waits | sluice.NeedsEnd }

// A chain with a policy that may wait allocates nothing per call either:
// the instants it keeps fit in the Call.
func TestGuardWithAWaitingPolicyAllocatesNothing(t *testing.T) {
	g, err := sluice.New(sluice.With(waitingNop{}, nopPolicy{name: "second"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { _ = g.Do(ctx, nop) }); n != 0 {
		t.Errorf("a call through a chain that may wait allocates %v times, want 0", n)
	}
}

// quiet is an Observer that attaches and hears every call, and does nothing
// with it: what is left is the cost of observation to the Guard itself.
type quiet struct{}

func (quiet) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return func(context.Context, sluice.CallEvent) {}, nil, nil
}

// BenchmarkGuardObserved puts a Guard of a rate limiter and a breaker, the
// common chain, beside the same Guard observed: its counters kept, its
// observer told of each call. Sub-benchmarks alternate, so that a drift of
// the machine falls on both. The breaker counts on a count window, so the
// unobserved Guard reads the clock once per call, and the observed one,
// for the latency, twice; "timed" has it count on a rolling window, which
// needs the end of each call: both Guards read the clock twice.
func BenchmarkGuardObserved(b *testing.B) {
	ctx := context.Background()
	build := func(timed, observed bool) *sluice.Guard {
		l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1e9), 1e9)
		if err != nil {
			b.Fatal(err)
		}
		var bo []breaker.Option
		if timed {
			bo = append(bo, breaker.WithRollingWindow(10*time.Second, 10))
		}
		br, err := breaker.New("dep", bo...)
		if err != nil {
			b.Fatal(err)
		}
		opts := []sluice.Option{sluice.With(l, br)}
		if observed {
			opts = append(opts, sluice.WithName("dep"), sluice.WithObserver(quiet{}))
		}
		g, err := sluice.New(opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = g.Close() })
		return g
	}
	for _, mode := range []string{"serial", "parallel", "timed", "timed-parallel"} {
		for _, observed := range []bool{false, true} {
			g := build(strings.HasPrefix(mode, "timed"), observed)
			name := mode + "/unobserved"
			if observed {
				name = mode + "/observed"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				if !strings.HasSuffix(mode, "parallel") {
					for b.Loop() {
						_ = g.Do(ctx, nop)
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						_ = g.Do(ctx, nop)
					}
				})
			})
		}
	}
}

// An observed Guard allocates nothing per call, admitted or rejected.
func TestObservedGuardAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	br, err := breaker.New("dep")
	if err != nil {
		t.Fatal(err)
	}
	g, err := sluice.New(sluice.With(br), sluice.WithObserver(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = g.Do(ctx, nop) }); n != 0 {
		t.Errorf("an observed call allocates %v times, want 0", n)
	}
	br.OpenFor(ctx, monoclock.Now(), time.Hour)
	if n := testing.AllocsPerRun(1000, func() { _ = g.Do(ctx, nop) }); n != 0 {
		t.Errorf("an observed rejection allocates %v times, want 0", n)
	}
}
