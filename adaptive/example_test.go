package adaptive_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
)

// The load shedder in front of a service, as "keep my server up in a surge"
// needs it: no figure to tell. Here its queue is off, so that a request over
// the limit is rejected at once, with the cause an adapter answers 503 for.
func ExampleNewShedder() {
	s, err := adaptive.NewShedder(adaptive.WithQueue(0, 0))
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(s), sluice.WithClock(sluice.NewManualClock(0)))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	ctx := context.Background()
	calls := make([]sluice.Call, s.Stats().Limit) // the initial limit, before any latency is seen
	for i := range calls {
		if err := g.Begin(ctx, &calls[i]); err != nil {
			panic(err)
		}
	}
	err = g.Begin(ctx, new(sluice.Call))
	fmt.Println(errors.Is(err, sluice.ErrOverloaded), s.Stats().State)
	for i := range calls {
		_ = calls[i].End(nil)
	}
	var call sluice.Call
	err = g.Begin(ctx, &call)
	fmt.Println(err)
	_ = call.End(nil)
	// Output:
	// true shedding
	// <nil>
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
	var first, second sluice.Call
	_ = g.Begin(ctx, &first)
	_ = g.Begin(ctx, &second) // held to the end: both slots taken
	st := b.Stats()
	fmt.Println("limit", st.Limit, "in flight", st.Inflight)
	err = g.Begin(ctx, new(sluice.Call))
	fmt.Println(errors.Is(err, sluice.ErrConcurrencyLimited), err)
	_ = first.End(nil)
	var call sluice.Call
	err = g.Begin(ctx, &call)
	fmt.Println(call.Decision().Allowed, err)
	// Output:
	// limit 2 in flight 2
	// true sluice: concurrency limited by adaptive/bulkhead; retry after 1s
	// true <nil>
}

// A SystemSampler reads what the container may use; Root points it at a
// fixture here.
func ExampleNewSystemSampler() {
	s, err := adaptive.NewSystemSampler(adaptive.SamplerConfig{Root: "testdata/cgroup2"})
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Load1())
	_, err = adaptive.NewSystemSampler(adaptive.SamplerConfig{Root: "testdata/none"})
	fmt.Println(err)
	// Output:
	// 2.5
	// adaptive: no CPU usage source: none of cgroup v2 cpu.stat, cgroup v1 cpuacct.usage or /proc/stat is readable
}
