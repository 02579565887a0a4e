package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// admit asks p to admit a request at now, and returns the Decision its
// Verdict stands for and its Ticket.
func admit(p sluice.Policy, ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	v := p.Admit(ctx, now)
	return v.Decision(p.Name()), v.Ticket
}

// step is one row of a step table: at instant at, a request of cost n
// (default 1) expects the decision's fields. Reset and RetryAfter are checked
// when they are not -1; ticket is released afterwards when release is set.
type step struct {
	at         time.Duration
	n          int64
	allowed    bool
	remaining  int64
	reset      time.Duration
	retryAfter time.Duration
	release    bool
}

// runSteps walks p through steps at their instants through its Policy
// methods, reporting every admitted request as a Success (or Released).
func runSteps(t *testing.T, p sluice.Policy, steps []step) {
	t.Helper()
	for i, s := range steps {
		ctx := context.Background()
		if s.n > 1 {
			ctx = sluice.WithCost(ctx, s.n)
		}
		d, tk := admit(p, ctx, s.at)
		if d.Allowed != s.allowed || d.Remaining != s.remaining ||
			(s.reset != -1 && d.Reset != s.reset) ||
			(s.retryAfter != -1 && d.RetryAfter != s.retryAfter) {
			t.Fatalf("step %d at %v n=%d: got allowed=%v remaining=%d reset=%v retryAfter=%v; want allowed=%v remaining=%d reset=%v retryAfter=%v",
				i, s.at, max(s.n, 1), d.Allowed, d.Remaining, d.Reset, d.RetryAfter,
				s.allowed, s.remaining, s.reset, s.retryAfter)
		}
		if d.Allowed {
			o := sluice.Success
			if s.release {
				o = sluice.Released
			}
			p.Done(tk, o, s.at, 0)
		}
	}
}
