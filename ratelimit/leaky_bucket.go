package ratelimit

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// LeakyBucket is the leaky bucket as a meter: each admitted request pours its
// cost into a bucket of the given capacity, which leaks at the rate; a request
// that would make it overflow is rejected. It admits bursts of up to capacity
// and, sustained, the rate. (NewShaper is the leaky bucket as a queue, which
// delays requests instead of rejecting them.)
//
// The bucket is kept as one atomic instant, the moment it will be empty,
// updated with compare-and-swap: one unit takes the interval Period/Count,
// rounded up to the nanosecond, to leak, so the limiter never admits faster
// than the rate.
//
// An instant older than one already seen (a clock stepping backwards, or a
// late caller) sees the bucket fuller than it was, so it never admits extra.
// Make one with NewLeakyBucket; the zero value is not usable.
type LeakyBucket struct {
	emptyAt atomic.Int64 // instant the bucket is empty; MinInt64 at first
	_       [56]byte     // keeps emptyAt alone on its cache line

	rate     Rate
	capacity int64
	unit     time.Duration // time one unit takes to leak
	full     time.Duration // capacity · unit
	cb       uint          // bits of the cost in a ticket
	cmask    uint64
	name     string
	clock    sluice.Clock
}

// NewLeakyBucket returns a meter that holds capacity cost units and leaks
// them at rate r.
//
// It fails when r is invalid (see Rate.Validate), capacity < 1, or the
// bucket would take too long to drain to track to the nanosecond
// (capacity · interval must stay below 2^(63-bits(capacity)) nanoseconds:
// 208 days for a capacity of 1000).
func NewLeakyBucket(r Rate, capacity int64, opts ...Option) (*LeakyBucket, error) {
	o, err := buildOptions("leaky-bucket", opts)
	if err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if capacity < 1 {
		return nil, fmt.Errorf("ratelimit: leaky bucket: capacity %d must be at least 1", capacity)
	}
	unit := (r.Period + time.Duration(r.Count) - 1) / time.Duration(r.Count)
	cb := uint(bits.Len64(uint64(capacity)))
	hi, full := bits.Mul64(uint64(capacity), uint64(unit))
	if hi != 0 || full >= 1<<(63-cb) {
		return nil, fmt.Errorf("ratelimit: leaky bucket: capacity %d at %v takes too long to drain", capacity, r)
	}
	b := &LeakyBucket{rate: r, capacity: capacity, unit: unit, full: time.Duration(full),
		cb: cb, cmask: 1<<cb - 1, name: o.name, clock: o.clock}
	b.emptyAt.Store(math.MinInt64)
	return b, nil
}

// Name returns the limiter's name, "ratelimit/leaky-bucket" unless set with
// WithName.
func (b *LeakyBucket) Name() string { return b.name }

// Rate returns the leak rate.
func (b *LeakyBucket) Rate() Rate { return b.rate }

// Capacity returns the bucket's capacity.
func (b *LeakyBucket) Capacity() int64 { return b.capacity }

// Admit decides on a request of cost sluice.CostFrom(ctx) at instant now.
func (b *LeakyBucket) Admit(ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	return b.decide(now, sluice.CostFrom(ctx))
}

// Done takes the admitted request's cost back out of the bucket when o is
// sluice.Released, as far as it has not leaked yet (the admit instant is
// now-latency, as a Guard reports it); other outcomes change nothing.
func (b *LeakyBucket) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	if o != sluice.Released {
		return
	}
	cost := time.Duration(uint64(t)&b.cmask) * b.unit
	// The request's last unit leaks out at its admit instant plus offset.
	end := now - max(latency, 0) + time.Duration(uint64(t)>>b.cb)
	give := min(end-now, cost)
	for give > 0 {
		e := b.emptyAt.Load()
		g := min(give, time.Duration(e)-now)
		if g <= 0 || b.emptyAt.CompareAndSwap(e, e-int64(g)) {
			return
		}
	}
}

// Allow is AllowNAt(clock.Now(), 1).
func (b *LeakyBucket) Allow() bool { return b.AllowNAt(b.clock.Now(), 1) }

// AllowN is AllowNAt(clock.Now(), n).
func (b *LeakyBucket) AllowN(n int64) bool { return b.AllowNAt(b.clock.Now(), n) }

// AllowAt is AllowNAt(now, 1).
func (b *LeakyBucket) AllowAt(now time.Duration) bool { return b.AllowNAt(now, 1) }

// AllowNAt reports whether n units fit in the bucket at instant now, and
// pours them in if so.
func (b *LeakyBucket) AllowNAt(now time.Duration, n int64) bool {
	d, _ := b.decide(now, n)
	return d.Allowed
}

// DecideAt decides on a request of cost n (taken as 1 when below 1) at
// instant now, and pours it in when it admits. Limit is the capacity,
// Remaining the whole units that still fit, Reset the time until the bucket
// is empty, and RetryAfter the time until n units fit. A cost above the
// capacity is rejected with ErrNeverSatisfiable.
func (b *LeakyBucket) DecideAt(now time.Duration, n int64) sluice.Decision {
	d, _ := b.decide(now, n)
	return d
}

func (b *LeakyBucket) decide(now time.Duration, n int64) (sluice.Decision, sluice.Ticket) {
	n = max(n, 1)
	for {
		e := time.Duration(b.emptyAt.Load())
		level := max(e-now, 0) // time the current content takes to leak
		if n > b.capacity {
			return never(b.name, b.capacity, int64((b.full-level)/b.unit), level), 0
		}
		after := level + time.Duration(n)*b.unit
		if after > b.full {
			return reject(b.name, b.capacity, int64(max(b.full-level, 0)/b.unit), level, after-b.full), 0
		}
		if b.emptyAt.CompareAndSwap(int64(e), int64(now+after)) {
			return allow(b.name, b.capacity, int64((b.full-after)/b.unit), after),
				sluice.Ticket(uint64(after)<<b.cb | uint64(n))
		}
	}
}
