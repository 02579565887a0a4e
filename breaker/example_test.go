package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
)

// A breaker on its own, as gobreaker's Execute: a Guard of the breaker
// alone runs the call and counts its outcome.
func ExampleNew() {
	b, err := breaker.New("payments",
		breaker.WithConsecutiveFailures(3),
		breaker.WithOpenDuration(10*time.Second),
	)
	if err != nil {
		panic(err)
	}
	b.Subscribe(func(c sluice.StateChange) { fmt.Printf("%s: %s -> %s\n", c.Policy, c.From, c.To) })
	clk := sluice.NewManualClock(0)
	g, err := sluice.New(sluice.With(b), sluice.WithClock(clk))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	down := errors.New("connection refused")
	for range 3 {
		_ = g.Do(ctx, func(context.Context) error { return down })
	}
	err = g.Do(ctx, func(context.Context) error { return nil })
	if d, ok := sluice.RejectionOf(err); ok {
		fmt.Println("rejected:", errors.Is(err, sluice.ErrCircuitOpen), "retry after", d.RetryAfter)
	}
	clk.Advance(10 * time.Second)
	fmt.Println("probe:", g.Do(ctx, func(context.Context) error { return nil }))
	// Output:
	// breaker/payments: closed -> open
	// rejected: true retry after 10s
	// breaker/payments: open -> half-open
	// breaker/payments: half-open -> closed
	// probe: <nil>
}

// A breaker in a Guard's chain: the Guard hands it the time and classifies
// errors; a subscriber hears its state changes.
func ExampleNew_guard() {
	clk := sluice.NewManualClock(0)
	b, err := breaker.New("search",
		breaker.WithErrorRatio(0.5, 4),
		breaker.WithCountWindow(10),
		breaker.WithBackoff(time.Second, 8*time.Second),
	)
	if err != nil {
		panic(err)
	}
	b.Subscribe(func(c sluice.StateChange) { fmt.Println(c.Policy, c.From, "->", c.To) })
	g, err := sluice.New(sluice.With(b), sluice.WithClock(clk))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	ctx := context.Background()
	for i := range 4 {
		_ = g.Do(ctx, func(context.Context) error {
			if i%2 == 0 {
				return errors.New("timeout")
			}
			return nil
		})
	}
	c := b.Counts()
	fmt.Println(b.State(), c.Requests, c.Failures)
	// Output:
	// breaker/search closed -> open
	// open 4 2
}

// The two-step form, for code that ends its calls by hand: a Guard of the
// breaker alone, Begin and End.
func ExampleBreaker_twoStep() {
	b, err := breaker.New("inventory")
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(b))
	if err != nil {
		panic(err)
	}
	var call sluice.Call
	err = g.Begin(context.Background(), &call)
	if err != nil {
		fmt.Println("rejected:", err)
		return
	}
	_ = call.End(nil) // report the call's error, exactly once
	fmt.Println(b.Counts().Successes)
	// Output:
	// 1
}

// Adaptive throttling rejects a share of the calls that grows as the
// dependency accepts fewer of them.
func ExampleNewAdaptive() {
	draw := 0.99 // fixed draws, for the example
	a, err := breaker.NewAdaptive("backend",
		breaker.WithMultiplier(2),
		breaker.WithRandom(func() float64 { return draw }),
	)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := range 10 {
		_, t := admit(a, ctx, 0)
		o := sluice.Failure
		if i < 2 {
			o = sluice.Success
		}
		a.Done(t, o, 0, 0)
	}
	// 10 requests, 2 accepted: a share (10 − 2·2)/(10+1) ≈ 0.545 is
	// rejected, the requests whose draw falls below it.
	for _, draw = range []float64{0.6, 0.3} {
		d, _ := admit(a, ctx, 0)
		fmt.Println(draw, d.Allowed, d.Cause)
	}
	// Output:
	// 0.6 true <nil>
	// 0.3 false sluice: circuit open
}

// A Group keeps one breaker per resource.
func ExampleGroup() {
	g, err := breaker.NewGroup("hosts", breaker.WithConsecutiveFailures(1))
	if err != nil {
		panic(err)
	}
	for _, host := range []string{"a.example", "b.example"} {
		ctx := sluice.WithResource(context.Background(), host)
		_, t := admit(g, ctx, 0)
		o := sluice.Success
		if host == "a.example" {
			o = sluice.Failure
		}
		g.Done(t, o, 0, 0)
	}
	a, _ := g.Get("a.example")
	b, _ := g.Get("b.example")
	fmt.Println(a.Name(), a.State())
	fmt.Println(b.Name(), b.State())
	// Output:
	// breaker/hosts/a.example open
	// breaker/hosts/b.example closed
}

// OpenFor honours a dependency's Retry-After.
func ExampleBreaker_OpenFor() {
	b, err := breaker.New("api")
	if err != nil {
		panic(err)
	}
	now := 5 * time.Second
	b.OpenFor(context.Background(), now, 30*time.Second) // the dependency answered 503, Retry-After: 30
	d, _ := admit(b, context.Background(), now+10*time.Second)
	fmt.Println(d.Allowed, d.RetryAfter)
	// Output:
	// false 20s
}
