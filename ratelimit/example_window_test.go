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
	w, err := ratelimit.NewFixedWindow(3, time.Second, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	clock.Set(900 * time.Millisecond)
	fmt.Println(w.Allow(), w.Allow(), w.Allow(), w.Allow())
	d := w.DecideAt(clock.Now(), 1)
	fmt.Println("retry after", d.RetryAfter)
	// A new window: the boundary lets another 3 through at once.
	clock.Set(1100 * time.Millisecond)
	fmt.Println(w.AllowN(3))
	// Output:
	// true true true false
	// retry after 100ms
	// true
}

func ExampleNewSlidingWindow() {
	// 3 requests in any second, tracked in 10 buckets of 100ms.
	w, err := ratelimit.NewSlidingWindow(3, time.Second, 10)
	if err != nil {
		panic(err)
	}
	fmt.Println(w.AllowNAt(900*time.Millisecond, 3))
	d := w.DecideAt(1100*time.Millisecond, 1)
	fmt.Println(d.Allowed, "retry after", d.RetryAfter)
	fmt.Println(w.AllowAt(1900 * time.Millisecond))
	// Output:
	// true
	// false retry after 800ms
	// true
}

func ExampleNewSlidingLog() {
	// At most 2 requests in any 10 seconds, exactly.
	l, err := ratelimit.NewSlidingLog(2, 10*time.Second, ratelimit.WithName("ratelimit/password-reset"))
	if err != nil {
		panic(err)
	}
	fmt.Println(l.AllowAt(0), l.AllowAt(4*time.Second))
	d := l.DecideAt(9*time.Second, 1)
	fmt.Println(d.Allowed, d.Policy, "retry after", d.RetryAfter, "reset", d.Reset)
	fmt.Println(l.AllowAt(10 * time.Second))
	d = l.DecideAt(10*time.Second, 3)
	fmt.Println(errors.Is(d.Cause, ratelimit.ErrNeverSatisfiable))
	// Output:
	// true true
	// false ratelimit/password-reset retry after 1s reset 5s
	// true
	// true
}

func ExampleNewLeakyBucket() {
	// Holds 5 units and leaks 10 a second: bursts of 5, then one per 100ms.
	b, err := ratelimit.NewLeakyBucket(ratelimit.PerSecond(10), 5)
	if err != nil {
		panic(err)
	}
	fmt.Println(b.AllowNAt(0, 5), b.AllowAt(0))
	d := b.DecideAt(50*time.Millisecond, 1)
	fmt.Println(d.Allowed, "retry after", d.RetryAfter, "empty in", d.Reset)

	// In a Guard, the cost of a request comes from its context.
	g, err := sluice.New(sluice.With(b), sluice.WithClock(sluice.NewManualClock(100*time.Millisecond)))
	if err != nil {
		panic(err)
	}
	err = g.Do(sluice.WithCost(context.Background(), 2), func(context.Context) error { return nil })
	fmt.Println(errors.Is(err, sluice.ErrRateLimited))
	// Output:
	// true false
	// false retry after 50ms empty in 450ms
	// true
}
