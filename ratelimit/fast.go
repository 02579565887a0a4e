package ratelimit

import (
	"context"
	"time"

	"github.com/sluice-go/sluice"
)

// The limiters that never wait are sluice.FastPolicy: a Guard takes their
// answer in registers rather than a Decision through memory. Each AdmitFast
// decides through the same code as its Admit; the token bucket's takes an
// admission's Quota straight from that code's answer.

// AdmitFast is Admit in the form of sluice.FastPolicy. An admission within
// the burst returns its Quota straight from the bucket's answer, without
// the Decision that Admit builds and FastAnswer would take apart again: the
// same figures, as allowQuota mirrors allow.
func (tb *TokenBucket) AdmitFast(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, *sluice.RejectedError) {
	n := sluice.CostFrom(ctx)
	if c := tb.cfg.Load(); max(n, 1) <= c.burst {
		base, next, res := tatTake(&c.tat.v, int64(now), max(n, 1)*c.iv, c.tau)
		switch res {
		case tatAllowed:
			return sluice.Ticket(n), allowQuota(c.burst, floorDiv(int64(now)+c.tau-next, c.iv), time.Duration(next-int64(now))), nil
		case tatRejected:
			rej := &sluice.RejectedError{}
			tatDecision(&rej.Decision, tb.name, c.burst, c.iv, c.tau, int64(now), base, next, res)
			return 0, sluice.Quota{}, rej
		}
		// tatMoved: a reconfiguration froze the word; decide retries.
	}
	var d sluice.Decision
	tb.decide(&d, now, n)
	return sluice.FastAnswer(&d, sluice.Ticket(n))
}

// FastOf returns tb itself, the owner of its AdmitFast (sluice.FastPolicy).
func (tb *TokenBucket) FastOf() sluice.Policy { return tb }

// AdmitFast is Admit in the form of sluice.FastPolicy.
func (g *GCRA) AdmitFast(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, *sluice.RejectedError) {
	n := sluice.CostFrom(ctx)
	var d sluice.Decision
	g.decide(&d, now, n)
	return sluice.FastAnswer(&d, sluice.Ticket(n))
}

// FastOf returns g itself, the owner of its AdmitFast (sluice.FastPolicy).
func (g *GCRA) FastOf() sluice.Policy { return g }

// AdmitFast is Admit in the form of sluice.FastPolicy.
func (b *LeakyBucket) AdmitFast(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, *sluice.RejectedError) {
	var d sluice.Decision
	t := b.decide(&d, now, sluice.CostFrom(ctx))
	return sluice.FastAnswer(&d, t)
}

// FastOf returns b itself, the owner of its AdmitFast (sluice.FastPolicy).
func (b *LeakyBucket) FastOf() sluice.Policy { return b }

// AdmitFast is Admit in the form of sluice.FastPolicy.
func (w *FixedWindow) AdmitFast(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, *sluice.RejectedError) {
	d, t := w.decide(now, sluice.CostFrom(ctx))
	return sluice.FastAnswer(&d, t)
}

// FastOf returns w itself, the owner of its AdmitFast (sluice.FastPolicy).
func (w *FixedWindow) FastOf() sluice.Policy { return w }

// AdmitFast is Admit in the form of sluice.FastPolicy.
func (w *SlidingWindow) AdmitFast(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, *sluice.RejectedError) {
	d, t := w.decide(now, sluice.CostFrom(ctx), true)
	return sluice.FastAnswer(&d, t)
}

// FastOf returns w itself, the owner of its AdmitFast (sluice.FastPolicy).
func (w *SlidingWindow) FastOf() sluice.Policy { return w }

// AdmitFast is Admit in the form of sluice.FastPolicy.
func (l *SlidingLog) AdmitFast(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, *sluice.RejectedError) {
	d, t := l.decide(now, sluice.CostFrom(ctx), true)
	return sluice.FastAnswer(&d, t)
}

// FastOf returns l itself, the owner of its AdmitFast (sluice.FastPolicy).
func (l *SlidingLog) FastOf() sluice.Policy { return l }

// AdmitFast is Admit in the form of sluice.FastPolicy.
func (w *WarmUp) AdmitFast(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, *sluice.RejectedError) {
	d, t, _ := w.decide(int64(now), sluice.CostFrom(ctx), true)
	return sluice.FastAnswer(&d, t)
}

// FastOf returns w itself, the owner of its AdmitFast (sluice.FastPolicy).
func (w *WarmUp) FastOf() sluice.Policy { return w }

// freshRejections reports whether p is one of the limiters above, whose
// AdmitFast makes a new *sluice.RejectedError for each rejection: a Keyed
// may then put its own name in it rather than copy it.
func freshRejections(p sluice.Policy) bool {
	switch p.(type) {
	case *TokenBucket, *GCRA, *LeakyBucket, *FixedWindow, *SlidingWindow, *SlidingLog, *WarmUp:
		return true
	}
	return false
}

var (
	_ sluice.FastPolicy = (*Keyed)(nil)
	_ sluice.FastPolicy = (*TokenBucket)(nil)
	_ sluice.FastPolicy = (*GCRA)(nil)
	_ sluice.FastPolicy = (*LeakyBucket)(nil)
	_ sluice.FastPolicy = (*FixedWindow)(nil)
	_ sluice.FastPolicy = (*SlidingWindow)(nil)
	_ sluice.FastPolicy = (*SlidingLog)(nil)
	_ sluice.FastPolicy = (*WarmUp)(nil)
)

// The limiters use the end instant and the latency of a call only to give
// back what a Released request took: they are sluice.UntimedDone, and a Guard
// of them (and of other such policies) reads the clock once per call.

// UntimedOf returns tb itself (sluice.UntimedDone).
func (tb *TokenBucket) UntimedOf() sluice.Policy { return tb }

// UntimedOf returns g itself (sluice.UntimedDone).
func (g *GCRA) UntimedOf() sluice.Policy { return g }

// UntimedOf returns b itself (sluice.UntimedDone).
func (b *LeakyBucket) UntimedOf() sluice.Policy { return b }

// UntimedOf returns w itself (sluice.UntimedDone).
func (w *FixedWindow) UntimedOf() sluice.Policy { return w }

// UntimedOf returns w itself (sluice.UntimedDone).
func (w *SlidingWindow) UntimedOf() sluice.Policy { return w }

// UntimedOf returns l itself (sluice.UntimedDone).
func (l *SlidingLog) UntimedOf() sluice.Policy { return l }

// UntimedOf returns w itself (sluice.UntimedDone).
func (w *WarmUp) UntimedOf() sluice.Policy { return w }

// UntimedOf returns s itself (sluice.UntimedDone).
func (s *Shaper) UntimedOf() sluice.Policy { return s }

var (
	_ sluice.UntimedDone = (*TokenBucket)(nil)
	_ sluice.UntimedDone = (*GCRA)(nil)
	_ sluice.UntimedDone = (*LeakyBucket)(nil)
	_ sluice.UntimedDone = (*FixedWindow)(nil)
	_ sluice.UntimedDone = (*SlidingWindow)(nil)
	_ sluice.UntimedDone = (*SlidingLog)(nil)
	_ sluice.UntimedDone = (*WarmUp)(nil)
	_ sluice.UntimedDone = (*Shaper)(nil)
)
