// Package testpolicy holds the small policies the middleware packages'
// tests guard their handlers with: one that rejects with a fixed Decision,
// one that admits everything, one that also counts the outcomes it hears
// of, a wrapper that gives a policy a window, and one that ends a context's
// deadline as it admits, as a policy that made the request wait until then;
// and MustGuard, which chains them.
package testpolicy

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policywindow"
)

// Rejecter rejects every request with its Decision.
type Rejecter struct{ D sluice.Decision }

// Name returns the Decision's policy.
func (p Rejecter) Name() string { return p.D.Policy }

// Admit rejects with the Decision's quota, delay and cause.
func (p Rejecter) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: p.D.Limit, Remaining: p.D.Remaining, Reset: p.D.Reset, RetryAfter: p.D.RetryAfter}, p.D.Cause
}

// Done is never called: a Rejecter admits nothing.
func (Rejecter) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

// Needs needs nothing.
func (Rejecter) Needs() sluice.Needs { return 0 }

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
func (*Counter) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1}, nil
}

// Needs needs nothing: a Counter counts outcomes, not latencies.
func (*Counter) Needs() sluice.Needs { return 0 }

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

// Windowed gives a policy the window W, as the windowed limiters have one,
// which package policywindow reports.
type Windowed struct {
	sluice.Policy
	W time.Duration
}

func init() {
	policywindow.Register(func(p any) time.Duration {
		if w, ok := p.(Windowed); ok {
			return w.W
		}
		return 0
	})
}

// Admitter admits every request and ignores its outcome.
type Admitter struct{ N string }

// Name returns N.
func (p Admitter) Name() string { return p.N }

// Admit admits, with no quota to report.
func (Admitter) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1}, nil
}

// Done does nothing.
func (Admitter) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

// Needs needs nothing.
func (Admitter) Needs() sluice.Needs { return 0 }

// Window returns an Admitter named name with the window w (0: none).
func Window(name string, w time.Duration) Windowed {
	return Windowed{Policy: Admitter{N: name}, W: w}
}

// MustGuard returns a Guard of the chain ps, failing t if New fails.
func MustGuard(t testing.TB, ps ...sluice.Policy) *sluice.Guard {
	t.Helper()
	g, err := sluice.New(sluice.With(ps...))
	require.NoError(t, err)
	return g
}

// EndingContext is a context whose deadline passes when End is called.
type EndingContext struct {
	context.Context
	once sync.Once
	done chan struct{}
}

// NewEndingContext returns an EndingContext whose deadline has not passed.
func NewEndingContext() *EndingContext {
	return &EndingContext{Context: context.Background(), done: make(chan struct{})}
}

// End makes the context's deadline pass.
func (c *EndingContext) End()                  { c.once.Do(func() { close(c.done) }) }
func (c *EndingContext) Done() <-chan struct{} { return c.done }
func (c *EndingContext) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// EndsOnAdmit admits every request as the deadline of the context set last
// passes, as a policy that made the request wait until its deadline.
type EndsOnAdmit struct {
	mu  sync.Mutex
	ctx *EndingContext
}

// Set makes ctx the context whose deadline passes at the next admission.
func (p *EndsOnAdmit) Set(ctx *EndingContext) {
	p.mu.Lock()
	p.ctx = ctx
	p.mu.Unlock()
}

func (*EndsOnAdmit) Name() string { return "test/ends" }
func (p *EndsOnAdmit) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	p.mu.Lock()
	p.ctx.End()
	p.mu.Unlock()
	return 0, sluice.Quota{Limit: -1}, nil
}
func (*EndsOnAdmit) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

// Needs declares Waits: the request waited in Admit until its deadline.
func (*EndsOnAdmit) Needs() sluice.Needs { return sluice.Waits }
