package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// A token bucket of 3 tokens refilled at 10 per second: a burst of 3, then
// one request every 100ms.
func ExampleNewTokenBucket() {
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 3)
	if err != nil {
		panic(err)
	}
	clock := sluice.NewManualClock(0)
	g, err := sluice.New(sluice.With(tb), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	for _, at := range []time.Duration{0, 0, 0, 0, 50 * time.Millisecond, 100 * time.Millisecond} {
		clock.Set(at)
		var call sluice.Call
		err := g.Begin(context.Background(), &call)
		d := call.Decision()
		fmt.Printf("at %v: allowed=%v remaining=%d retry-after=%v\n", clock.Now(), d.Allowed, d.Remaining, d.RetryAfter)
		_ = call.End(err)
	}
	// Output:
	// at 0s: allowed=true remaining=2 retry-after=0s
	// at 0s: allowed=true remaining=1 retry-after=0s
	// at 0s: allowed=true remaining=0 retry-after=0s
	// at 0s: allowed=false remaining=0 retry-after=100ms
	// at 50ms: allowed=false remaining=0 retry-after=50ms
	// at 100ms: allowed=true remaining=0 retry-after=0s
}

// Changing the rate at runtime keeps the tokens the bucket holds.
func ExampleTokenBucket_SetLimit() {
	clock := sluice.NewManualClock(0)
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	tb.AllowN(10) // empty
	if err := tb.SetLimit(ratelimit.PerSecond(100), 10); err != nil {
		panic(err)
	}
	clock.Advance(50 * time.Millisecond)
	fmt.Printf("%.0f tokens after 50ms at the new rate\n", tb.Tokens())
	fmt.Println(tb.SetLimit(ratelimit.Rate{}, 10) != nil)
	// Output:
	// 5 tokens after 50ms at the new rate
	// true
}

// GCRA keeps one theoretical arrival time: 100 per second with a burst of
// 100 admits 100 requests at 0.99s and, 20ms later, the 2 that have refilled.
func ExampleNewGCRA() {
	limiter, err := ratelimit.NewGCRA(ratelimit.PerSecond(100), 100)
	if err != nil {
		panic(err)
	}
	clock := sluice.NewManualClock(0)
	g, err := sluice.New(sluice.With(limiter), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	ok := func(context.Context) error { return nil }
	count := func(at time.Duration) (n int) {
		clock.Set(at)
		for range 100 {
			if g.Do(context.Background(), ok) == nil {
				n++
			}
		}
		return n
	}
	fmt.Println("at 0.99s:", count(990*time.Millisecond))
	fmt.Println("at 1.01s:", count(1010*time.Millisecond))
	// A rejection says when to retry.
	d, _ := sluice.RejectionOf(g.Do(context.Background(), ok))
	fmt.Println("retry after", d.RetryAfter, "reset", d.Reset)
	// Output:
	// at 0.99s: 100
	// at 1.01s: 2
	// retry after 10ms reset 1s
}

// A warm-up limiter starts cold at a third of its rate and reaches its full
// rate over the warm-up period.
func ExampleNewWarmUp() {
	w, err := ratelimit.NewWarmUp(ratelimit.PerSecond(10), 1, 2*time.Second, 3)
	if err != nil {
		panic(err)
	}
	clock := sluice.NewManualClock(0)
	g, err := sluice.New(sluice.With(w), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	ok := func(context.Context) error { return nil }
	last := time.Duration(0)
	for i := range 13 {
		// Each request retries once, when its rejection says to.
		if d, rejected := sluice.RejectionOf(g.Do(context.Background(), ok)); rejected {
			clock.Advance(d.RetryAfter)
			_ = g.Do(context.Background(), ok)
		}
		if i > 0 && i%3 == 0 {
			fmt.Printf("request %d: %v after the one before\n", i, clock.Now()-last)
		}
		last = clock.Now()
	}
	// Output:
	// request 3: 250ms after the one before
	// request 6: 190ms after the one before
	// request 9: 130ms after the one before
	// request 12: 100ms after the one before
}

// A shaper spaces requests evenly: through a Guard, a request waits for its
// turn, up to the maximum wait, and one whose turn lies further is rejected
// at once.
func ExampleNewShaper() {
	s, err := ratelimit.NewShaper(ratelimit.PerSecond(10), 250*time.Millisecond)
	if err != nil {
		panic(err)
	}
	clock := sluice.NewManualClock(0)
	g, err := sluice.New(sluice.With(s), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	ok := func(context.Context) error { return nil }
	fmt.Println("at 0s:", g.Do(context.Background(), ok)) // the next turn is at 100ms
	clock.Set(100 * time.Millisecond)
	fmt.Println("at 100ms:", g.Do(context.Background(), ok))
	clock.Set(200 * time.Millisecond)
	// A request of cost 4 takes the turns up to 600ms.
	fmt.Println("at 200ms:", g.Do(sluice.WithCost(context.Background(), 4), ok))
	clock.Set(300 * time.Millisecond) // the next turn, at 600ms, is 300ms away
	d, _ := sluice.RejectionOf(g.Do(context.Background(), ok))
	fmt.Println("next turn in", d.Reset, "retry after", d.RetryAfter)
	// Output:
	// at 0s: <nil>
	// at 100ms: <nil>
	// at 200ms: <nil>
	// next turn in 300ms retry after 50ms
}
