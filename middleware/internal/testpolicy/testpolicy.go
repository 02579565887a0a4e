// Package testpolicy holds the small policies the adapters' tests guard
// their handlers with: one that rejects with a fixed Decision, one that
// admits everything and counts the outcomes it hears of, and a wrapper that
// gives a policy a window.
package testpolicy

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
)

// Rejecter rejects every request with its Decision.
type Rejecter struct{ D sluice.Decision }

// Name returns the Decision's policy.
func (p Rejecter) Name() string { return p.D.Policy }

// Admit rejects with the Decision.
func (p Rejecter) Admit(context.Context, time.Duration) (sluice.Decision, sluice.Ticket) {
	return p.D, 0
}

// Done is never called: a Rejecter admits nothing.
func (Rejecter) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

// Reject returns a Rejecter for cause, with RetryAfter retry and no quota.
func Reject(cause error, retry time.Duration) Rejecter {
	return Rejecter{sluice.Decision{Policy: "test/reject", Limit: -1, RetryAfter: retry, Cause: cause}}
}

// Counter admits every request and counts the outcomes reported to it.
type Counter struct {
	mu       sync.Mutex
	outcomes map[sluice.Outcome]int
}

// NewCounter returns a Counter that has counted nothing.
func NewCounter() *Counter { return &Counter{outcomes: map[sluice.Outcome]int{}} }

// Name returns "test/count".
func (*Counter) Name() string { return "test/count" }

// Admit admits.
func (*Counter) Admit(context.Context, time.Duration) (sluice.Decision, sluice.Ticket) {
	return sluice.Decision{Allowed: true, Policy: "test/count", Limit: -1}, 0
}

// Done counts o.
func (c *Counter) Done(_ sluice.Ticket, o sluice.Outcome, _, _ time.Duration) {
	c.mu.Lock()
	c.outcomes[o]++
	c.mu.Unlock()
}

// Outcomes returns a copy of the counts so far.
func (c *Counter) Outcomes() map[sluice.Outcome]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[sluice.Outcome]int, len(c.outcomes))
	for o, n := range c.outcomes {
		out[o] = n
	}
	return out
}

// Windowed gives a policy a Window, as the windowed limiters have.
type Windowed struct {
	sluice.Policy
	W time.Duration
}

// Window returns W.
func (p Windowed) Window() time.Duration { return p.W }
