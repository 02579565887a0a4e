package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policytest"
)

// admit asks p to admit a request at now, and returns the Decision its
// answer stands for and its Ticket.
func admit(p sluice.Policy, ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	return policytest.Admit(ctx, p, now)
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

// decideAt decides on a request of cost n at instant now through p's Admit,
// and reports an admission as a Success at once, so the quota taken is kept:
// the decision a caller outside a Guard would get.
func decideAt(p sluice.Policy, now time.Duration, n int64) sluice.Decision {
	d, tk := admit(p, costCtx(n), now)
	if d.Allowed {
		p.Done(tk, sluice.Success, now, 0)
	}
	return d
}

// allowKeyAt reports whether k admits a request of cost 1 with key at
// instant now, through its Admit, keeping the quota taken.
func allowKeyAt(k *Keyed, now time.Duration, key string) bool {
	return decideKeyAt(k, now, key, 1).Allowed
}

// decideKeyAt decides on a request of cost n with key at instant now
// through k's Admit, as decideAt does.
func decideKeyAt(k *Keyed, now time.Duration, key string, n int64) sluice.Decision {
	return decideAt(keyedAs(k, key), now, n)
}

var (
	costMu   sync.Mutex
	costCtxs = map[int64]context.Context{}
)

// costCtx returns a context of cost n, made once per n, so that the
// allocation tests can decide through Admit at any cost.
func costCtx(n int64) context.Context {
	costMu.Lock()
	defer costMu.Unlock()
	ctx := costCtxs[n]
	if ctx == nil {
		ctx = sluice.WithCost(context.Background(), n)
		costCtxs[n] = ctx
	}
	return ctx
}

// bareAllower is what every limiter of this package offers the step tables:
// a bare answer at an instant, with no ticket to keep and no wait.
type bareAllower interface {
	allowNAt(now time.Duration, n int64) bool
}
