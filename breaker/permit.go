package breaker

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
)

func randFloat() float64 { return rand.Float64() }

// permitEnv is what a policy of this package needs to serve calls outside a
// Guard: its clock and classifier, and a Guard of its own through which
// Execute runs, so that it behaves as a Guard of the policy does.
type permitEnv struct {
	clock    sluice.Clock
	classify sluice.Classifier
	system   bool          // clock is sluice.SystemClock: read it without an interface call
	g        *sluice.Guard // the policy alone, on its clock and classifier
}

func newPermitEnv(clock sluice.Clock, classify sluice.Classifier) permitEnv {
	return permitEnv{clock: clock, classify: classify, system: clock == sluice.SystemClock}
}

// bind makes the Guard through which p serves calls outside a Guard. It
// runs once p is whole, since a Guard reads p's Name and Needs.
func (e *permitEnv) bind(p sluice.Policy) {
	// A Guard of one policy, with a clock and a classifier the options
	// validated, cannot fail.
	e.g, _ = sluice.New(sluice.With(p), sluice.WithClock(e.clock), sluice.WithClassifier(e.classify))
}

func (e *permitEnv) now() time.Duration {
	if e.system {
		return monoclock.Now()
	}
	return e.clock.Now()
}

// Execute runs fn if the breaker lets it through, and reports how it ended,
// classified by the WithClassifier option: a breaker on its own, as
// gobreaker's Execute. In a chain, or to end a call by hand, put the breaker
// in a sluice.Guard and use its Do or Begin. It returns the rejection when
// the breaker rejects, and fn's error otherwise. If fn panics, the call
// counts as a failure and the panic goes on.
func (b *Breaker) Execute(fn func() error) error {
	return b.env.g.Do(context.Background(), func(context.Context) error { return fn() })
}

// Execute runs fn if the throttle lets it through, and reports how it ended,
// as Breaker.Execute does.
func (a *Adaptive) Execute(fn func() error) error {
	return a.env.g.Do(context.Background(), func(context.Context) error { return fn() })
}
