package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

func ExampleNewFixedWindow() {
	clock := sluice.NewManualClock(0)
	// 3 requests a second, counted in windows [0s, 1s), [1s, 2s), ...
	w, err := ratelimit.NewFixedWindow(3, time.Second)
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(w), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	allow := func(n int64) bool {
		return g.Do(sluice.WithCost(context.Background(), n), func(context.Context) error { return nil }) == nil
	}
	clock.Set(900 * time.Millisecond)
	fmt.Println(allow(1), allow(1), allow(1))
	// A rejection says when to retry.
	d, _ := sluice.RejectionOf(g.Do(context.Background(), func(context.Context) error { return nil }))
	fmt.Println("retry after", d.RetryAfter)
	// A new window: the boundary lets another 3 through at once.
	clock.Set(1100 * time.Millisecond)
	fmt.Println(allow(3))
	// Output:
	// true true true
	// retry after 100ms
	// true
}

func ExampleNewSlidingWindow() {
	clock := sluice.NewManualClock(0)
	// 3 requests in any second, tracked in 10 buckets of 100ms.
	w, err := ratelimit.NewSlidingWindow(3, time.Second, 10)
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(w), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	allow := func(n int64) bool {
		return g.Do(sluice.WithCost(context.Background(), n), func(context.Context) error { return nil }) == nil
	}
	clock.Set(900 * time.Millisecond)
	fmt.Println(allow(3))
	clock.Set(1100 * time.Millisecond)
	d, rejected := sluice.RejectionOf(g.Do(context.Background(), func(context.Context) error { return nil }))
	fmt.Println(rejected, "retry after", d.RetryAfter)
	clock.Set(1900 * time.Millisecond)
	fmt.Println(allow(1))
	// Output:
	// true
	// true retry after 800ms
	// true
}

func ExampleNewSlidingLog() {
	clock := sluice.NewManualClock(0)
	// At most 2 requests in any 10 seconds, exactly.
	l, err := ratelimit.NewSlidingLog(2, 10*time.Second, ratelimit.WithName("ratelimit/password-reset"))
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(l), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	ok := func(context.Context) error { return nil }
	first := g.Do(context.Background(), ok) == nil
	clock.Set(4 * time.Second)
	fmt.Println(first, g.Do(context.Background(), ok) == nil)
	clock.Set(9 * time.Second)
	d, _ := sluice.RejectionOf(g.Do(context.Background(), ok))
	fmt.Println(d.Policy, "retry after", d.RetryAfter, "reset", d.Reset)
	clock.Set(10 * time.Second)
	fmt.Println(g.Do(context.Background(), ok) == nil)
	err = g.Do(sluice.WithCost(context.Background(), 3), ok)
	fmt.Println(errors.Is(err, ratelimit.ErrNeverSatisfiable))
	// Output:
	// true true
	// ratelimit/password-reset retry after 1s reset 5s
	// true
	// true
}

func ExampleNewLeakyBucket() {
	clock := sluice.NewManualClock(0)
	// Holds 5 units and leaks 10 a second: bursts of 5, then one per 100ms.
	b, err := ratelimit.NewLeakyBucket(ratelimit.PerSecond(10), 5)
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(b), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	ok := func(context.Context) error { return nil }
	// The cost of a request comes from its context.
	fmt.Println(g.Do(sluice.WithCost(context.Background(), 5), ok) == nil, g.Do(context.Background(), ok) == nil)
	clock.Set(50 * time.Millisecond)
	d, _ := sluice.RejectionOf(g.Do(context.Background(), ok))
	fmt.Println("retry after", d.RetryAfter, "empty in", d.Reset)
	clock.Set(100 * time.Millisecond)
	err = g.Do(sluice.WithCost(context.Background(), 2), ok)
	fmt.Println(errors.Is(err, sluice.ErrRateLimited))
	// Output:
	// true false
	// retry after 50ms empty in 450ms
	// true
}
