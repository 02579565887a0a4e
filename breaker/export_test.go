package breaker

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
)

// guards holds a Guard of each policy alone, on the policy's clock, made
// once: the tests run calls through it without allocating.
var guards sync.Map // sluice.Policy → *sluice.Guard

func guardOf(p sluice.Policy, clock sluice.Clock) *sluice.Guard {
	if g, ok := guards.Load(p); ok {
		return g.(*sluice.Guard)
	}
	// A Guard of one valid policy on a valid clock cannot fail.
	g, _ := sluice.New(sluice.With(p), sluice.WithClock(clock))
	actual, _ := guards.LoadOrStore(p, g)
	return actual.(*sluice.Guard)
}

// Allow begins a call through a Guard of the breaker alone, for the tests
// that end calls by hand.
func (b *Breaker) Allow() (*sluice.Call, error) {
	c := new(sluice.Call)
	return c, guardOf(b, b.env.clock).Begin(context.Background(), c)
}

// AllowInto is Allow writing the call into c, for the tests that count
// allocations.
func (b *Breaker) AllowInto(c *sluice.Call) error {
	return guardOf(b, b.env.clock).Begin(context.Background(), c)
}

// Execute runs fn through a Guard of the breaker alone.
func (b *Breaker) Execute(fn func() error) error {
	return guardOf(b, b.env.clock).Do(context.Background(), func(context.Context) error { return fn() })
}

// AllowInto is Breaker.AllowInto for the throttle.
func (a *Adaptive) AllowInto(c *sluice.Call) error {
	return guardOf(a, a.env.clock).Begin(context.Background(), c)
}

// Allow is Breaker.Allow for the throttle.
func (a *Adaptive) Allow() (*sluice.Call, error) {
	c := new(sluice.Call)
	return c, guardOf(a, a.env.clock).Begin(context.Background(), c)
}

// Execute is Breaker.Execute for the throttle.
func (a *Adaptive) Execute(fn func() error) error {
	return guardOf(a, a.env.clock).Do(context.Background(), func(context.Context) error { return fn() })
}

// Requests returns the requests and accepts counted in the window ending at
// now.
func (a *Adaptive) Requests(now time.Duration) (requests, accepts int64) {
	t := a.win.Load().readAt(now)
	return max(t.total, 0), max(t.lo, 0)
}

// RejectProbability returns the probability with which a request arriving
// at instant now would be rejected.
func (a *Adaptive) RejectProbability(now time.Duration) float64 {
	return a.probability(a.cfg.Load(), a.win.Load().readAt(now))
}
