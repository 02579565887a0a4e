package ratelimit

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
)

// LeakyBucket is the leaky bucket as a meter: each admitted request pours its
// cost into a bucket of the given capacity, which leaks at the rate; a request
// that would make it overflow is rejected. It admits bursts of up to capacity
// and, sustained, the rate. (NewShaper is the leaky bucket as a queue, which
// delays requests instead of rejecting them.)
//
// The meter is the same arithmetic as GCRA, seen from the other side: the
// bucket is kept as one atomic instant, the moment it will be empty (GCRA's
// theoretical arrival time), updated with compare-and-swap on its own cache
// line. One unit takes the interval Period/Count, rounded up to the
// nanosecond, to leak, so the limiter never admits faster than the rate.
// Where they differ is Released: a LeakyBucket's ticket remembers where the
// request's cost sits in the bucket, so a release takes out exactly what of
// it has not leaked yet, even behind earlier content. When another release
// came between the request's admission and its own, the content ahead of it
// may have shrunk and its place in the ticket is stale; the release then
// takes out what surely remains (its cost less the time since it was
// admitted), never more than is left of it.
//
// An instant older than one already seen (a clock stepping backwards, or a
// late caller) sees the bucket fuller than it was, so it never admits extra.
// Make one with NewLeakyBucket; the zero value is not usable.
type LeakyBucket struct {
	emptyAt paddedTAT // instant the bucket is empty; emptyTAT at first

	rate     Rate
	capacity int64
	unit     int64 // nanoseconds one unit takes to leak
	full     int64 // capacity · unit
	cb       uint  // bits of the cost in a ticket
	cmask    uint64
	name     string

	relMu       sync.Mutex // serialises releases, so each knows of the others
	lastRelease int64      // instant of the latest release; noRelease at first
}

const noRelease = math.MinInt64

// NewLeakyBucket returns a meter that holds capacity cost units and leaks
// them at rate r. It starts empty.
//
// It fails when r is invalid (see Rate.Validate), capacity < 1, or the
// bucket would take too long to drain to track to the nanosecond
// (capacity · interval must stay below 2^(63-bits(capacity)) nanoseconds:
// about 104 days for a capacity of 1000).
func NewLeakyBucket(r Rate, capacity int64, opts ...Option) (*LeakyBucket, error) {
	o, err := buildOptions("leaky-bucket", false, opts)
	if err != nil {
		return nil, err
	}
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("ratelimit: leaky bucket: %w", err)
	}
	if capacity < 1 {
		return nil, fmt.Errorf("ratelimit: leaky bucket: capacity %d must be at least 1", capacity)
	}
	unit := interval(r)
	cb := uint(bits.Len64(uint64(capacity)))
	hi, full := bits.Mul64(uint64(capacity), uint64(unit))
	if hi != 0 || full >= 1<<(63-cb) {
		return nil, fmt.Errorf("ratelimit: leaky bucket: capacity %d at %v takes too long to drain", capacity, r)
	}
	b := &LeakyBucket{rate: r, capacity: capacity, unit: unit, full: int64(full),
		cb: cb, cmask: 1<<cb - 1, name: o.name}
	b.emptyAt.v.Store(emptyTAT)
	b.lastRelease = noRelease
	return b, nil
}

// Name returns the limiter's name, "ratelimit/leaky-bucket" unless set with
// WithName.
func (b *LeakyBucket) Name() string { return b.name }

// rateWindow returns the time a full bucket takes to drain, capacity × interval:
// the w of the RateLimit-Policy header field.
func (b *LeakyBucket) rateWindow() time.Duration { return time.Duration(b.full) }

// admitD decides as Admit does, with its answer as a Decision.
func (b *LeakyBucket) admitD(ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	var d sluice.Decision
	t := b.decide(&d, now, sluice.CostFrom(ctx))
	return d, t
}

// Done takes the admitted request's cost back out of the bucket when o is
// sluice.Released, as far as it has not leaked yet (the admit instant is
// now-latency, as a Guard reports it); other outcomes change nothing.
func (b *LeakyBucket) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	if o != sluice.Released || t == 0 {
		return
	}
	cost := int64(uint64(t)&b.cmask) * b.unit
	latency = max(latency, 0)
	admitted := int64(now - latency)
	b.relMu.Lock()
	defer b.relMu.Unlock()
	// The request's last unit leaks out at its admit instant plus the offset
	// kept in the ticket, unless a release since then moved it forward: it
	// has leaked for latency at most, so cost-latency of it is surely left.
	left := max(cost-int64(latency), 0)
	if b.lastRelease < admitted {
		end := admitted + int64(uint64(t)>>b.cb)
		left = min(end-int64(now), cost)
	}
	b.lastRelease = max(b.lastRelease, int64(now))
	tatRefund(&b.emptyAt.v, left, int64(now), nil)
}

// allowNAt decides on a request of cost n at now, taking its quota when it
// is admitted: the bare answer, with no ticket, of the step tables in tests.
func (b *LeakyBucket) allowNAt(now time.Duration, n int64) bool {
	n = max(n, 1)
	if n > b.capacity {
		return false
	}
	_, _, res := tatTake(&b.emptyAt.v, int64(now), n*b.unit, b.full)
	return res == tatAllowed
}

func (b *LeakyBucket) decide(d *sluice.Decision, now time.Duration, n int64) sluice.Ticket {
	n = max(n, 1)
	if n > b.capacity {
		base := max(b.emptyAt.v.Load(), int64(now))
		*d = never(b.name, b.capacity, floorDiv(int64(now)+b.full-base, b.unit), time.Duration(base-int64(now)))
		return 0
	}
	base, next, res := tatTake(&b.emptyAt.v, int64(now), n*b.unit, b.full)
	tatDecision(d, b.name, b.capacity, b.unit, b.full, int64(now), base, next, res)
	if res != tatAllowed {
		return 0
	}
	return sluice.Ticket(uint64(next-int64(now))<<b.cb | uint64(n))
}
