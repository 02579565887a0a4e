package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
)

// A Guard sheds only while CPU is high and more requests are in flight than
// the service was seen to carry: here 10 requests per 100 ms bucket at
// 20 ms each, so 10 × 20ms / 100ms = 2.
func ExampleNewGuard() {
	cpu := adaptive.NewManualSampler(0.3, 0) // a SystemSampler by default
	g, err := adaptive.NewGuard(adaptive.WithSampler(cpu), adaptive.WithWindow(time.Second, 10))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	ctx := context.Background()
	for b := range 10 { // one second of traffic
		at := time.Duration(b) * 100 * time.Millisecond
		for range 10 {
			_, t := admit(g, ctx, at)
			g.Done(t, sluice.Success, at+20*time.Millisecond, 20*time.Millisecond)
		}
	}
	fmt.Println("may carry:", g.Stats().MaxInflight)

	now := time.Second
	cpu.SetCPU(0.9)
	for i := range 4 {
		d, _ := admit(g, ctx, now) // held in flight
		fmt.Println(i, d.Allowed, d.Cause, d.RetryAfter)
	}
	fmt.Println(g.State())
	// Output:
	// may carry: 2
	// 0 true <nil> 0s
	// 1 true <nil> 0s
	// 2 true <nil> 0s
	// 3 false sluice: overloaded: cpu above threshold and inflight above estimated capacity 1s
	// shedding
}

// System rules work without CPU readings; critical requests get headroom.
func ExampleWithMaxInflight() {
	g, err := adaptive.NewGuard(adaptive.WithSampler(adaptive.NewManualSampler(0, 0)),
		adaptive.WithMaxInflight(2))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	ctx := context.Background()
	critical := sluice.WithPriority(ctx, sluice.PriorityCritical)
	for _, c := range []context.Context{ctx, ctx, ctx, critical} {
		d, _ := admit(g, c, 0)
		fmt.Println(d.Allowed, errors.Is(d.Cause, adaptive.ErrMaxInflight))
	}
	// Output:
	// true false
	// true false
	// false true
	// true false
}

// A bulkhead inside a sluice.Guard: the third concurrent call is rejected
// with ErrConcurrencyLimited, and the slot comes back when a call ends.
func ExampleNewBulkhead() {
	b, err := adaptive.NewBulkhead(2)
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(b), sluice.WithClock(sluice.NewManualClock(0)))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	ctx := context.Background()
	first, _ := g.Begin(ctx)
	_, _ = g.Begin(ctx)
	st := b.Stats()
	fmt.Println("limit", st.Limit, "in flight", st.Inflight)
	_, err = g.Begin(ctx)
	fmt.Println(errors.Is(err, sluice.ErrConcurrencyLimited), err)
	_ = first.End(nil)
	call, err := g.Begin(ctx)
	fmt.Println(call.Decision().Allowed, err)
	// Output:
	// limit 2 in flight 2
	// true sluice: concurrency limited by adaptive/bulkhead; retry after 1ms
	// true <nil>
}

// An AIMD limit learns from each window: it grows while the limit is in use
// and requests are fast, and backs off when one is slower than Timeout.
func ExampleNewConcurrencyLimit() {
	l, err := adaptive.NewConcurrencyLimit(adaptive.WithAlgorithm(adaptive.AIMD{
		InitialLimit: 4, Window: time.Second, MinSamples: 1, Timeout: 100 * time.Millisecond,
	}))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i, latency := range []time.Duration{10, 10, 10, 500, 10} {
		at := time.Duration(i) * time.Second
		var ts []sluice.Ticket
		for range 4 {
			_, t := admit(l, ctx, at)
			ts = append(ts, t)
		}
		for _, t := range ts {
			l.Done(t, sluice.Success, at, latency*time.Millisecond)
		}
		fmt.Println(at, "limit", l.Stats().Limit)
	}
	// Output:
	// 0s limit 4
	// 1s limit 5
	// 2s limit 6
	// 3s limit 7
	// 4s limit 6
}

// A SystemSampler reads what the container may use; Root points it at a
// fixture here.
func ExampleNewSystemSampler() {
	s, err := adaptive.NewSystemSampler(adaptive.SamplerConfig{Root: "testdata/cgroup2"})
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Source(), s.Load1())
	_, err = adaptive.NewSystemSampler(adaptive.SamplerConfig{Root: "testdata/none"})
	fmt.Println(err)
	// Output:
	// cgroup2 2.5
	// adaptive: no CPU usage source: none of cgroup v2 cpu.stat, cgroup v1 cpuacct.usage or /proc/stat is readable
}
