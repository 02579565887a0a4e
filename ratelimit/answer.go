package ratelimit

import (
	"context"
	"time"

	"github.com/sluice-go/sluice"
)

// The limiters decide through one piece of code each, which builds a
// Decision; Admit hands it to a Guard as a ticket, a sluice.Quota and the
// cause. The token bucket's admission within its burst takes its answer
// straight from its compare-and-swap.

// answer returns Admit's answer for Decision d with ticket t.
func answer(d *sluice.Decision, t sluice.Ticket) (sluice.Ticket, sluice.Quota, error) {
	if !d.Allowed {
		return 0, sluice.Quota{Limit: d.Limit, Remaining: d.Remaining, Reset: d.Reset, RetryAfter: d.RetryAfter}, d.Cause
	}
	return t, sluice.Quota{Limit: d.Limit, Remaining: d.Remaining, Reset: d.Reset}, nil
}

// Admit decides on one request at instant now, whose cost in tokens is
// sluice.CostFrom(ctx), and takes the tokens when it admits. More than the
// burst is rejected with ErrNeverSatisfiable. It never blocks: a Guard that
// should delay requests instead of rejecting them uses a Shaper.
func (tb *TokenBucket) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	n := sluice.CostFrom(ctx)
	if ok, t, q, err := tatAdmit(tb.cfg.Load(), tb.name, now, n); ok {
		return t, q, err
	}
	var d sluice.Decision
	tb.decide(&d, now, n)
	return answer(&d, sluice.Ticket(n))
}

// tatAdmit is Admit for a bucket of configuration c kept as one theoretical
// arrival time (a token bucket, a GCRA), for a request of cost n within its
// burst: its answer straight from the compare-and-swap. ok is false when the
// cost is over the burst or a reconfiguration froze the word: decide then
// answers.
func tatAdmit(c *bucketConfig, name string, now time.Duration, n int64) (bool, sluice.Ticket, sluice.Quota, error) {
	if max(n, 1) > c.burst {
		return false, 0, sluice.Quota{}, nil
	}
	base, next, res := tatTake(&c.tat.v, int64(now), max(n, 1)*c.iv, c.tau)
	switch res {
	case tatAllowed:
		return true, sluice.Ticket(n), sluice.Quota{Limit: c.burst,
			Remaining: max(floorDiv(int64(now)+c.tau-next, c.iv), 0),
			Reset:     max(time.Duration(next-int64(now)), 0)}, nil
	case tatRejected:
		var d sluice.Decision
		tatDecision(&d, name, c.burst, c.iv, c.tau, int64(now), base, next, res)
		t, q, err := answer(&d, 0)
		return true, t, q, err
	}
	return false, 0, sluice.Quota{}, nil // tatMoved
}

// Admit decides on one request at instant now, whose cost is
// sluice.CostFrom(ctx), and takes its quota when it admits. A cost above the
// burst is rejected with ErrNeverSatisfiable. It never blocks.
func (g *GCRA) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	n := sluice.CostFrom(ctx)
	if ok, t, q, err := tatAdmit(g.cfg.Load(), g.name, now, n); ok {
		return t, q, err
	}
	var d sluice.Decision
	g.decide(&d, now, n)
	return answer(&d, sluice.Ticket(n))
}

// Admit decides on a request of cost sluice.CostFrom(ctx) at instant now,
// and pours it in when it admits. Limit is the capacity, Remaining the whole
// units that still fit, Reset the time until the bucket is empty, and
// RetryAfter the time until the cost fits. A cost above the capacity is
// rejected with ErrNeverSatisfiable.
func (b *LeakyBucket) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	d, t := b.admitD(ctx, now)
	return answer(&d, t)
}

// Admit decides on a request of cost sluice.CostFrom(ctx) at instant now,
// and takes the units when it admits. Limit is the window's limit, Remaining
// what is left of it, Reset the time until the window ends (0 when nothing
// of it is used) and RetryAfter the same on a rejection. A cost above the
// limit is rejected with ErrNeverSatisfiable.
func (w *FixedWindow) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	d, t := w.admitD(ctx, now)
	return answer(&d, t)
}

// Admit decides on a request of cost sluice.CostFrom(ctx) at instant now,
// and takes the units when it admits. Limit is the window's limit, Remaining
// what is left of it, Reset the time until every counted unit has left the
// window, and RetryAfter the time until enough have left for the cost. A
// cost above the limit is rejected with ErrNeverSatisfiable.
func (w *SlidingWindow) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	d, t := w.admitD(ctx, now)
	return answer(&d, t)
}

// Admit decides on a request of cost sluice.CostFrom(ctx) at instant now,
// and logs it when it admits. Limit is the window's limit, Remaining what is
// left of it, Reset the time until every logged unit has left the window,
// and RetryAfter the time until enough have left for the cost. A cost above
// the limit is rejected with ErrNeverSatisfiable.
func (l *SlidingLog) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	d, t := l.admitD(ctx, now)
	return answer(&d, t)
}

// Admit decides on one request at instant now, whose cost is
// sluice.CostFrom(ctx), and takes its quota when it admits. More than the
// burst is rejected with ErrNeverSatisfiable. It never blocks.
func (w *WarmUp) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	d, t := w.admitD(ctx, now)
	return answer(&d, t)
}

// Admit waits for the turn of one request arriving at instant now, whose
// cost is sluice.CostFrom(ctx). It rejects at once, taking nothing, when the
// turn lies beyond the maximum wait (ErrRateLimited) or beyond ctx's deadline
// (ErrWouldExceedDeadline); when ctx ends during the wait, it gives the turn
// back and rejects with a cause that matches ErrRateLimited and ctx's error
// (context.Canceled or context.DeadlineExceeded).
func (s *Shaper) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	d, t := s.admitD(ctx, now)
	return answer(&d, t)
}

// The limiters use the end instant of a call only to give back what a
// Released request took, which a Guard always tells them: they need nothing
// more of it. A Shaper with a maximum wait may block in Admit.

// Needs returns 0: the bucket neither waits nor needs the end of a call.
func (tb *TokenBucket) Needs() sluice.Needs { return 0 }

// Needs returns 0: GCRA neither waits nor needs the end of a call.
func (g *GCRA) Needs() sluice.Needs { return 0 }

// Needs returns 0: the bucket neither waits nor needs the end of a call.
func (b *LeakyBucket) Needs() sluice.Needs { return 0 }

// Needs returns 0: the window neither waits nor needs the end of a call.
func (w *FixedWindow) Needs() sluice.Needs { return 0 }

// Needs returns 0: the window neither waits nor needs the end of a call.
func (w *SlidingWindow) Needs() sluice.Needs { return 0 }

// Needs returns 0: the log neither waits nor needs the end of a call.
func (l *SlidingLog) Needs() sluice.Needs { return 0 }

// Needs returns 0: the limiter neither waits nor needs the end of a call.
func (w *WarmUp) Needs() sluice.Needs { return 0 }

// Needs returns sluice.Waits when the shaper has a maximum wait: its Admit
// then blocks until the request's turn.
func (s *Shaper) Needs() sluice.Needs {
	if s.cfg.Load().maxWait > 0 {
		return sluice.Waits
	}
	return 0
}

var (
	_ sluice.Policy = (*Keyed)(nil)
	_ sluice.Policy = (*TokenBucket)(nil)
	_ sluice.Policy = (*GCRA)(nil)
	_ sluice.Policy = (*LeakyBucket)(nil)
	_ sluice.Policy = (*FixedWindow)(nil)
	_ sluice.Policy = (*SlidingWindow)(nil)
	_ sluice.Policy = (*SlidingLog)(nil)
	_ sluice.Policy = (*WarmUp)(nil)
	_ sluice.Policy = (*Shaper)(nil)
)
