package degrade_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/ratelimit"
)

// Fallbacks declared by cause: a rate-limited request gets a short answer,
// one turned away by an open breaker gets a cached one, and any other failure
// is declined so the caller sees it.
func ExampleNew() {
	clock := sluice.NewManualClock(0)
	br, err := breaker.New("quotes", breaker.WithClock(clock))
	if err != nil {
		panic(err)
	}
	limiter, err := ratelimit.NewFixedWindow(2, time.Minute, ratelimit.WithName("ratelimit/quotes"))
	if err != nil {
		panic(err)
	}
	quotes, err := degrade.New(
		degrade.OnRateLimited(func(ctx context.Context, err error) (string, error) {
			return "busy: try again shortly", nil
		}),
		degrade.OnCircuitOpen(degrade.Value("EUR/USD 1.08 (cached)")),
		degrade.OnError(func(ctx context.Context, err error) (string, error) {
			return "", err // declines: the caller sees the error
		}),
	)
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(
		sluice.WithClock(clock),
		sluice.With(br, limiter),
		sluice.WithFallback(quotes),
		sluice.OnFallback(func(ctx context.Context, ev sluice.FallbackEvent) {
			fmt.Printf("  (%q served: %s by %s)\n", ev.Fallback, ev.Cause, ev.Policy)
		}),
	)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	fetch := func(ctx context.Context) (string, error) { return "EUR/USD 1.09", nil }
	show := func(v string, err error) { fmt.Printf("%q, error: %v\n", v, err) }

	for range 3 {
		show(sluice.Execute(ctx, g, fetch))
	}
	clock.Advance(time.Minute) // a new window
	show(sluice.Execute(ctx, g, func(ctx context.Context) (string, error) {
		return "", errors.New("quotes: bad gateway")
	}))
	br.ForceOpen()
	show(sluice.Execute(ctx, g, fetch))
	// Output:
	// "EUR/USD 1.09", error: <nil>
	// "EUR/USD 1.09", error: <nil>
	//   ("rate-limited" served: rate-limited by ratelimit/quotes)
	// "busy: try again shortly", error: <nil>
	// "", error: quotes: bad gateway
	//   ("circuit-open" served: circuit-open by breaker/quotes)
	// "EUR/USD 1.08 (cached)", error: <nil>
}

// A stale answer: when the dependency fails, the last good answer for the
// key is served, with its age for an HTTP Age header.
func ExampleStale() {
	clock := sluice.NewManualClock(0)
	prices, err := degrade.NewStale[string](10*time.Minute, 10_000, degrade.WithClock(clock))
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}

	up := func(ctx context.Context) (string, error) { return "42.00", nil }
	down := func(ctx context.Context) (string, error) { return "", errors.New("prices: unavailable") }

	r, err := prices.Execute(context.Background(), g, "sku-1", up)
	fmt.Println(r.Value, r.Stale, err)

	clock.Advance(90 * time.Second)
	r, err = prices.Execute(context.Background(), g, "sku-1", down)
	fmt.Printf("%s stale=%v Age: %d\n", r.Value, r.Stale, int64(r.Age/time.Second))

	clock.Advance(time.Hour)
	_, err = prices.Execute(context.Background(), g, "sku-1", down)
	fmt.Println(err)
	// Output:
	// 42.00 false <nil>
	// 42.00 stale=true Age: 90
	// prices: unavailable
}

// A degradation switch: handlers skip recommendations while it is on. It is
// set by hand, or follows a breaker with hysteresis: on as soon as the
// breaker opens, off once it has stayed closed for 30 seconds.
func ExampleSwitch() {
	clock := sluice.NewManualClock(0)
	recs, err := degrade.NewSwitch("recommendations", degrade.WithClock(clock))
	if err != nil {
		panic(err)
	}
	recs.Subscribe(func(c sluice.StateChange) {
		fmt.Printf("  %s: %s -> %s at %v\n", c.Policy, c.From, c.To, c.At)
	})

	page := func() string {
		if recs.On() {
			return "product"
		}
		return "product + recommendations"
	}
	fmt.Println(page())

	recs.Set(true) // an operator sheds the extra work by hand
	fmt.Println(page())
	recs.Set(false)

	br, err := breaker.New("recommender", breaker.WithClock(clock))
	if err != nil {
		panic(err)
	}
	open, stop, err := degrade.StateSignal(br, "open", "half-open")
	if err != nil {
		panic(err)
	}
	defer stop()
	auto, err := degrade.NewAuto(recs, open, degrade.Hysteresis{OnAbove: 0.5, OffBelow: 0.5, OffFor: 30 * time.Second})
	if err != nil {
		panic(err)
	}

	clock.Set(10 * time.Second)
	br.ForceOpen()
	auto.Check()
	fmt.Println(page())

	clock.Set(20 * time.Second)
	br.Reset()
	auto.Check() // closed since 20 s: still on
	clock.Set(50 * time.Second)
	auto.Check() // closed for 30 s: off
	fmt.Println(page())
	// Output:
	// product + recommendations
	//   recommendations: off -> on at 0s
	// product
	//   recommendations: on -> off at 0s
	//   recommendations: off -> on at 10s
	// product
	//   recommendations: on -> off at 50s
	// product + recommendations
}

// A switch driven by CPU usage with hysteresis: on once usage has stayed
// above 85% for 10 seconds, off once it has stayed below 60% for 30 seconds,
// so a usage hovering around one level does not make it flap.
func ExampleAuto() {
	clock := sluice.NewManualClock(0)
	// In production: the CPU method of an adaptive.SystemSampler.
	usage := 0.5
	cpu := func() float64 { return usage }
	rich, err := degrade.NewSwitch("rich-fields", degrade.WithClock(clock))
	if err != nil {
		panic(err)
	}
	rich.Subscribe(func(c sluice.StateChange) { fmt.Printf("%v: %s -> %s\n", c.At, c.From, c.To) })
	auto, err := degrade.NewAuto(rich, cpu, degrade.Hysteresis{
		OnAbove: 0.85, OnFor: 10 * time.Second,
		OffBelow: 0.6, OffFor: 30 * time.Second,
	})
	if err != nil {
		panic(err)
	}

	// In production: go auto.Run(ctx, time.Second). Here the clock steps.
	for s, u := range []float64{0.9, 0.95, 0.7, 0.9, 0.9, 0.9, 0.7, 0.5, 0.5, 0.5, 0.5} {
		clock.Set(time.Duration(s) * 10 * time.Second)
		usage = u
		auto.Check()
	}
	fmt.Println("on:", rich.On())
	// Output:
	// 10s: off -> on
	// 1m40s: on -> off
	// on: false
}
