package breaker

import (
	"errors"
	"time"

	"github.com/sluice-go/sluice"
)

// Reconfigure changes the breaker's numbers while it runs: its trip
// strategies, window, open duration or backoff, jitter and half-open
// probes. opts are New's options and are validated as New validates
// them, as a whole: a setting not given takes its default, as in New.
// WithClock and WithRandom say how the breaker is wired and cannot
// change. On an error nothing changes.
//
// The breaker keeps its state: an open breaker stays open until the end
// of its current open spell, a half-open one counts its probes against
// the new numbers, and a closed one keeps its counts when its window has
// the same shape (the same count, or the same length and buckets), and
// starts a new window otherwise. A change that would alter what the
// breaker needs of a Guard (the end of each call: see Needs) is refused,
// since a Guard asks once.
func (b *Breaker) Reconfigure(opts ...Option) error {
	old := b.cfg.Load()
	c, err := rebuildConfig(forBreaker, old, opts)
	if err != nil {
		return err
	}
	if err := sameNeeds(old, c, b.env.system); err != nil {
		return err
	}
	b.reconfigureAt(c)
	b.dispatch()
	return nil
}

// reconfigureAt publishes c as reconfigure does, at the breaker's present
// instant; the caller then tells the listeners of a change it made
// (dispatch).
func (b *Breaker) reconfigureAt(c *config) {
	// Drawn before the lock (it may open, if half-open by then).
	now, draw := b.env.now(), jitterDraw(c)
	b.mu.Lock()
	b.reconfigure(c, now, draw)
	b.mu.Unlock()
}

// reconfigure publishes c, starting a closed breaker's new window when
// its shape changed. A half-open breaker whose probes that have ended
// already decide under c's numbers (all the probes c allows were taken,
// and no more outcome would come to decide) closes or opens at now, open
// for its duration shortened by the jitter's share draw. Called with b.mu
// held.
func (b *Breaker) reconfigure(c *config, now time.Duration, draw float64) {
	old := b.cfg.Swap(c)
	p := b.cur.Load()
	if p.state == StateHalfOpen {
		b.settleProbes(p, c, now, draw)
		return
	}
	if p.state != StateClosed || sameWindow(old, c) {
		return
	}
	// A new generation with the new window, in the same state: the
	// outcomes of calls admitted before are dropped, as the window they
	// were counted in is gone. No state change to report.
	b.gen++
	np := newPhase(b.gen, StateClosed, p.forced)
	b.newWindow(np)
	b.cur.Store(np)
}

func sameWindow(a, b *config) bool {
	return a.count == b.count && a.length == b.length && a.buckets == b.buckets
}

func sameNeeds(old, c *config, system bool) error {
	if needs(old, system) != needs(c, system) {
		return errors.New("breaker: Reconfigure: the change alters what the breaker needs of a Guard (a count window without a slow-call strategy needs no end instant; a rolling window or a slow-call strategy does): build a new breaker")
	}
	return nil
}

// Reconfigure changes the numbers of every breaker of the Group, those it
// holds and those it makes later, as Breaker.Reconfigure does. opts are
// NewGroup's options; WithKeyFunc and WithMaxBreakers, like the wiring
// options Breaker.Reconfigure refuses, cannot change.
func (g *Group) Reconfigure(opts ...Option) error {
	ms, err := g.reconfigure(opts)
	// The listeners hear what a change did outside the Group's lock: one
	// may call back into the Group.
	for _, m := range ms {
		m.b.dispatch()
	}
	return err
}

// reconfigure is Reconfigure under g.mu, released however it ends (a
// clock or random source of the user's that panics); it returns the
// members it reconfigured.
func (g *Group) reconfigure(opts []Option) ([]*member, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.memberCfg
	c, err := rebuildConfig(forGroup, old, opts)
	if err != nil {
		return nil, err
	}
	if err := sameNeeds(old, c, old.clock == sluice.SystemClock); err != nil {
		return nil, err
	}
	g.memberCfg = c
	ms := append([]*member(nil), g.all...)
	if g.overflow != nil {
		ms = append(ms, g.overflow)
	}
	for _, m := range ms {
		m.b.reconfigureAt(c)
	}
	return ms, nil
}

// Reconfigure changes the throttle's numbers while it runs: its
// multiplier, window and minimum of requests. opts are NewAdaptive's
// options, validated as NewAdaptive validates them, as a whole: a setting
// not given takes its default. WithClock and WithRandom cannot change. On an error nothing changes. The throttle keeps its
// counts when the window keeps its length and buckets, and starts an empty
// window otherwise.
func (a *Adaptive) Reconfigure(opts ...Option) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Read under the lock: a Reconfigure that ended meanwhile published
	// the window this one is compared with.
	old := a.cfg.Load()
	c, err := rebuildConfig(forAdaptive, old, opts)
	if err != nil {
		return err
	}
	if !sameWindow(old, c) {
		a.win.Store(newTimeWindow(c.length, c.buckets, true))
	}
	a.cfg.Store(c)
	return nil
}
