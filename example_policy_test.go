package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// inFlight is a complete policy: it admits at most max calls at a time and
// rejects the rest with sluice.ErrConcurrencyLimited. The Guard hands it
// the instants; it needs nothing more of the Guard (Needs is 0).
type inFlight struct {
	max int64
	n   atomic.Int64
}

func (p *inFlight) Name() string { return "in-flight" }

func (p *inFlight) Admit(_ context.Context, _ time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if n := p.n.Add(1); n > p.max {
		p.n.Add(-1)
		return 0, sluice.Quota{Limit: p.max, RetryAfter: 10 * time.Millisecond}, sluice.ErrConcurrencyLimited
	}
	return 0, sluice.Quota{Limit: p.max, Remaining: p.max - p.n.Load()}, nil
}

// Done gives the slot back, whatever the outcome: a Released call (a policy
// further in rejected it) too.
func (p *inFlight) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) { p.n.Add(-1) }

func (p *inFlight) Needs() sluice.Needs { return 0 }

// A custom policy is four methods; a Guard runs it like any of sluice's.
func ExamplePolicy() {
	g, err := sluice.New(sluice.With(&inFlight{max: 1}))
	if err != nil {
		panic(err)
	}
	defer g.Close()

	ctx := context.Background()
	_ = g.Do(ctx, func(context.Context) error {
		// One call is in flight: a second one is turned away.
		err := g.Do(ctx, func(context.Context) error { return nil })
		fmt.Println(errors.Is(err, sluice.ErrConcurrencyLimited))
		if d, ok := sluice.RejectionOf(err); ok {
			fmt.Println(d.Policy, d.Limit, d.RetryAfter > 0)
		}
		return nil
	})
	fmt.Println(g.Do(ctx, func(context.Context) error { return nil }))
	// Output:
	// true
	// in-flight 1 true
	// <nil>
}
