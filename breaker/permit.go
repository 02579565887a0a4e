package breaker

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/sluice-go/sluice"
)

func randFloat() float64 { return rand.Float64() }

// permitEnv is what a policy of this package needs to serve calls outside a
// Guard: its clock and classifier, and a Guard of its own through which
// Allow and Execute run, so that they behave as a Guard of the policy does.
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
		return sluice.Now()
	}
	return e.clock.Now()
}

// Allow asks whether a call may go through now, outside a Guard. When it
// may, it returns a nil error and the sluice.Call to end exactly once, with
// End, when the call has returned; otherwise the rejection, matching
// sluice.ErrCircuitOpen. It allocates nothing, even when it rejects.
func (b *Breaker) Allow() (sluice.Call, error) { return b.env.g.Begin(context.Background()) }

// Execute runs fn if the breaker lets it through, and reports how it ended,
// classified by the WithClassifier option. It returns the rejection when
// the breaker rejects, and fn's error otherwise. If fn panics, the call
// counts as a failure and the panic goes on.
func (b *Breaker) Execute(fn func() error) error {
	return b.env.g.Do(context.Background(), func(context.Context) error { return fn() })
}

// Allow asks whether a request may go through now, as Breaker.Allow does.
func (a *Adaptive) Allow() (sluice.Call, error) { return a.env.g.Begin(context.Background()) }

// Execute runs fn if the throttle lets it through, and reports how it ended,
// as Breaker.Execute does.
func (a *Adaptive) Execute(fn func() error) error {
	return a.env.g.Do(context.Background(), func(context.Context) error { return fn() })
}
