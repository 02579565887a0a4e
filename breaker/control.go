package breaker

import (
	"context"
	"time"

	"github.com/sluice-go/sluice"
)

// transition runs fn with the lock held, then calls the listeners.
func (b *Breaker) transition(fn func(p *phase, now time.Duration)) {
	now := b.env.now()
	b.mu.Lock()
	fn(b.cur.Load(), now)
	b.mu.Unlock()
	b.dispatch()
}

// ForceOpen opens the breaker and holds it open, with no probes, until
// ForceClose or Reset. Its rejections carry the base open duration as
// RetryAfter.
func (b *Breaker) ForceOpen() {
	b.transition(func(p *phase, now time.Duration) {
		b.setPhase(p, StateOpen, now, 0, true)
	})
}

// ForceClose closes the breaker with an empty window and holds it closed
// until ForceOpen or Reset: outcomes are still counted, but nothing trips
// it, and OpenFor has no effect.
func (b *Breaker) ForceClose() {
	b.transition(func(p *phase, now time.Duration) {
		b.setPhase(p, StateClosed, now, 0, true)
	})
}

// Reset brings the breaker back to how New made it: closed, with an empty
// window, the backoff at its base, and any ForceOpen or ForceClose lifted.
func (b *Breaker) Reset() {
	b.transition(func(p *phase, now time.Duration) {
		b.trips = 0
		b.hungWait.Store(0)
		b.setPhase(p, StateClosed, now, 0, false)
	})
}

// OpenFor opens the breaker at instant now for at least d, as when the
// dependency answered with a Retry-After: an open breaker whose open period
// ends sooner is extended, a closed or half-open one opens. It does not count
// as a trip for the backoff, and does nothing on a breaker held by
// ForceOpen or ForceClose, or when d ≤ 0. ctx is not read: the breaker holds
// every call. It implements sluice.Opener, through which the net/http
// Transport and the gRPC client interceptors call it.
func (b *Breaker) OpenFor(_ context.Context, now, d time.Duration) {
	if d <= 0 {
		return
	}
	b.mu.Lock()
	p := b.cur.Load()
	if !p.forced && (p.state != StateOpen || p.openUntil-now < d) {
		b.setPhase(p, StateOpen, now, d, false)
	}
	b.mu.Unlock()
	b.dispatch()
}

// Subscribe registers fn, called after every state change of the breaker
// with its name, the two states and the instant. It implements
// sluice.StateSource, so observers (observe/statelog) hear the breaker.
//
// Listeners run outside the breaker's lock, one change at a time, in the
// order the changes happened, each change once: a listener may call back into
// the breaker (State, Counts, Reset...) without deadlock, and a change it
// causes is delivered after it returns. The listeners of a change run on the
// goroutine that made it, or, when another goroutine is already delivering
// changes, on that one. The returned function removes fn.
func (b *Breaker) Subscribe(fn func(sluice.StateChange)) (unsubscribe func()) {
	if fn == nil {
		return func() {}
	}
	return b.notifier.add(subscriber{fn: fn})
}
