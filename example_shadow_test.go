package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// A new limit in shadow mode: it decides every call, and counts the ones
// it would reject, but lets them through until it enforces.
func ExampleGuard_SetShadow() {
	clock := sluice.NewManualClock(time.Second)
	limit, err := ratelimit.NewFixedWindow(3, time.Minute, ratelimit.WithName("per-minute"))
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(limit), sluice.WithClock(clock), sluice.WithObserver(countOnly{}),
		sluice.WithShadow("per-minute"))
	if err != nil {
		panic(err)
	}
	ok := func(context.Context) error { return nil }
	for range 5 {
		_ = g.Do(context.Background(), ok)
	}
	fmt.Println("would have rejected:", g.Stats().Policies[0].ShadowRejected)

	if err := g.SetShadow("per-minute", false); err != nil {
		panic(err)
	}
	fmt.Println("enforcing:", g.Do(context.Background(), ok))

	// A tighter limit, in the same window: what was counted stays counted.
	if err := limit.SetLimit(2, time.Minute); err != nil {
		panic(err)
	}
	fmt.Println(limit.SetLimit(0, time.Minute))
	// Output:
	// would have rejected: 2
	// enforcing: sluice: rate limited by per-minute; retry after 59s
	// ratelimit: fixed window: limit 0 must be at least 1
}

// countOnly is an Observer that only asks the Guard to keep its counters.
type countOnly struct{}

func (countOnly) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return nil, nil, nil
}
