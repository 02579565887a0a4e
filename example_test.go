package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// A Guard runs a call through its policies. This one allows 2 calls a second
// with a burst of 2; the third call in the same instant is rejected, with the
// time to wait.
func ExampleGuard_Do() {
	clock := sluice.NewManualClock(0) // a real service leaves the clock out
	limiter, err := ratelimit.NewGCRA(ratelimit.PerSecond(2), 2, ratelimit.WithName("ratelimit/api"))
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(limiter), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		err := g.Do(ctx, func(context.Context) error {
			fmt.Println("call", i, "ran")
			return nil
		})
		if errors.Is(err, sluice.ErrRateLimited) {
			fmt.Println("call", i, "rejected:", err)
		}
	}
	clock.Advance(500 * time.Millisecond)
	_ = g.Do(ctx, func(context.Context) error { fmt.Println("after 500ms, a call ran"); return nil })
	// Output:
	// call 1 ran
	// call 2 ran
	// call 3 rejected: sluice: rate limited by ratelimit/api; retry after 500ms
	// after 500ms, a call ran
}

// Execute is Do for calls that return a value.
func ExampleExecute() {
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(100), 10)
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(limiter))
	if err != nil {
		panic(err)
	}
	price, err := sluice.Execute(context.Background(), g, func(context.Context) (float64, error) {
		return 9.99, nil // call the pricing service here
	})
	fmt.Println(price, err)
	// Output: 9.99 <nil>
}

// Begin is the two-step form for adapters and streams: the Call's Decision
// carries what the rate-limit headers need, and End reports how the call
// ended.
func ExampleGuard_Begin() {
	clock := sluice.NewManualClock(0)
	limiter, err := ratelimit.NewFixedWindow(100, time.Minute, ratelimit.WithName("ratelimit/per-user"))
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(limiter), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	var call sluice.Call
	err = g.Begin(context.Background(), &call)
	d := call.Decision()
	if err != nil {
		fmt.Println("rejected; retry after", d.RetryAfter)
		_ = call.End(err) // the Guard's fallbacks may answer
		return
	}
	fmt.Printf("%s: %d of %d left, whole again in %v\n", d.Policy, d.Remaining, d.Limit, d.Reset)
	clock.Advance(30 * time.Millisecond) // the request runs with call.Context()
	_ = call.End(nil)                    // exactly once, with the call's error
	// Output: ratelimit/per-user: 99 of 100 left, whole again in 1m0s
}
