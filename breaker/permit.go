package breaker

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/sluice-go/sluice"
)

func randFloat() float64 { return rand.Float64() }

// Permit is a call let through by Allow or Decide, outside a Guard. Report
// how the call ended exactly once, with Finish or Record. The zero Permit, as
// returned with a rejection, does nothing.
type Permit struct {
	env   *permitEnv // nil: the zero Permit
	t     sluice.Ticket
	start time.Duration // noStart when the clock was not read
}

// noStart marks a Permit whose start instant was not read. Three words keep
// Allow's and Decide's results small.
const noStart = time.Duration(math.MinInt64)

// permitEnv is what every Permit of one policy shares.
type permitEnv struct {
	p        sluice.Policy
	clock    sluice.Clock
	classify sluice.Classifier
	timed    bool // Done needs the end instant
	system   bool // clock is sluice.SystemClock: read it without an interface call
}

func newPermitEnv(p sluice.Policy, clock sluice.Clock, classify sluice.Classifier, timed bool) permitEnv {
	return permitEnv{p: p, clock: clock, classify: classify, timed: timed, system: clock == sluice.SystemClock}
}

func (e *permitEnv) now() time.Duration {
	if e.system {
		return sluice.Now()
	}
	return e.clock.Now()
}

// Finish reports the end of the call: nil is a success, whatever the
// classifier; an error is classified by the WithClassifier option
// (sluice.DefaultClassifier by default: a sluice rejection or
// context.Canceled is ignored, any other error is a failure).
func (p Permit) Finish(err error) {
	if p.env == nil {
		return
	}
	p.Record(p.classify(err))
}

// classify returns the outcome of a call that ended with err. A call that
// returned nil is a Success, as in a Guard: a sluice.Classifier is asked
// only for errors.
func (p Permit) classify(err error) sluice.Outcome {
	if p.env == nil {
		return sluice.Ignored
	}
	if err == nil {
		return sluice.Success
	}
	return p.env.classify(err)
}

// Record reports the end of the call with outcome o. The clock is read only
// when the policy needs the end instant or the latency; otherwise the
// breaker reads it itself if the outcome changes its state.
func (p Permit) Record(o sluice.Outcome) {
	if p.env == nil {
		return
	}
	now, lat := sluice.Unread, time.Duration(0)
	if p.env.timed {
		now = p.env.now()
		if p.start != noStart {
			lat = max(now-p.start, 0)
		}
	}
	p.env.p.Done(p.t, o, now, lat)
}

// Allowed reports whether the Permit lets a call through.
func (p Permit) Allowed() bool { return p.env != nil }

// Allow asks whether a call may go through now. When it may, it returns a
// Permit on which the call's end must be reported once; otherwise a
// *sluice.RejectedError matching sluice.ErrCircuitOpen. It reads the
// breaker's clock only when it needs the time: a closed breaker without a
// slow-call strategy does not.
func (b *Breaker) Allow() (Permit, error) {
	if p := b.cur.Load(); p.state == StateClosed && b.slow == 0 {
		return Permit{env: &b.env, t: p.ticket(false), start: noStart}, nil
	}
	d, pm := b.Decide()
	if !d.Allowed {
		return pm, &sluice.RejectedError{Decision: d}
	}
	return pm, nil
}

// Decide is Allow returning the Decision instead of an error: it allocates
// nothing, even when it rejects.
func (b *Breaker) Decide() (sluice.Decision, Permit) {
	p := b.cur.Load()
	if p.state == StateClosed && b.slow == 0 {
		d := sluice.Decision{Allowed: true, Policy: b.name, Limit: -1}
		return d, Permit{env: &b.env, t: p.ticket(false), start: noStart}
	}
	if p.state == StateOpen {
		ra := b.cfg.openBase // held open: no need of the time
		if !p.forced {
			var now time.Duration
			if b.env.system {
				now = sluice.Now() // inlined: one read of the runtime's clock
			} else {
				now = b.env.clock.Now()
			}
			ra = p.openUntil - now
		}
		if ra > 0 {
			return sluice.Decision{Policy: b.name, Limit: -1, RetryAfter: ra, Cause: sluice.ErrCircuitOpen}, Permit{}
		}
	}
	return b.decideSlow(p)
}

func (b *Breaker) decideSlow(p *phase) (sluice.Decision, Permit) {
	now := b.env.now()
	d, t := b.admitSlow(p, now)
	if !d.Allowed {
		return d, Permit{}
	}
	return d, Permit{env: &b.env, t: t, start: now}
}

// Execute runs fn if the breaker lets it through, and reports how it ended.
// It returns a *sluice.RejectedError when the breaker rejects, and fn's error
// otherwise. If fn panics, the call counts as a failure and the panic goes
// on.
func (b *Breaker) Execute(fn func() error) error {
	pm, err := b.Allow()
	if err != nil {
		return err
	}
	return run(pm, fn)
}

func run(pm Permit, fn func() error) error {
	finished := false
	defer func() {
		if !finished {
			pm.Record(sluice.Failure)
		}
	}()
	err := fn()
	o := pm.classify(err) // a classifier that panics leaves the call a Failure
	finished = true
	pm.Record(o)
	return err
}
