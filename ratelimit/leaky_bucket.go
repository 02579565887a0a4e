package ratelimit

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policywindow"
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
// ran between the request's admission and its own, the content ahead of it
// may have shrunk and its place in the ticket is stale; the release then
// takes out what surely remains (its cost less the time since it was
// admitted), never more than is left of it. Which requests those are is
// told by the bucket's content, not by instants, which a release run late
// carries early: a request whose content ends within what the bucket held
// when a release ran counts as admitted before it. So does one admitted
// after it into the room it freed, ending no later than the content did
// then: its release takes out what surely remains too, and the bucket
// errs on the side of fewer admissions.
//
// An instant older than one already seen (a clock stepping backwards, or a
// late caller) sees the bucket fuller than it was, so it never admits extra.
// Make one with NewLeakyBucket; the zero value is not usable.
type LeakyBucket struct {
	cfg  atomic.Pointer[leakyConfig]
	mu   sync.Mutex // serialises SetLimit
	name string

	relMu sync.Mutex // serialises releases, so each knows of the others
	// released is the latest instant the bucket was to be empty at when a
	// release ran (noRelease at first): a request whose content ended at
	// or before it was admitted before a release, which may have moved
	// the content ahead of it. Instants cannot tell: a release carrying an
	// early instant may run after a later admission.
	released int64
}

// leakyConfig is one configuration of a LeakyBucket with its own state
// word; SetLimit moves the state to a new one and freezes the old word, so
// a decision racing with the change retries on the new configuration.
type leakyConfig struct {
	emptyAt paddedTAT // instant the bucket is empty; emptyTAT at first, tatFrozen once replaced

	rate     Rate
	capacity int64
	unit     int64 // nanoseconds one unit takes to leak
	full     int64 // capacity · unit
	cb       uint  // bits of the cost in a ticket
	cmask    uint64
	since    time.Duration // the instant SetLimit made it; releases of earlier admissions are dropped
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
	c, err := newLeakyConfig(r, capacity)
	if err != nil {
		return nil, err
	}
	c.since = math.MinInt64
	c.emptyAt.v.Store(emptyTAT)
	b := &LeakyBucket{name: o.name, released: noRelease}
	b.cfg.Store(c)
	return b, nil
}

func newLeakyConfig(r Rate, capacity int64) (*leakyConfig, error) {
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
	return &leakyConfig{rate: r, capacity: capacity, unit: unit, full: int64(full), cb: cb, cmask: 1<<cb - 1}, nil
}

// SetLimit changes the rate and the capacity, validated as NewLeakyBucket
// validates them: on an error nothing changes. The bucket keeps the
// instant it will be empty, so its content drains in the time it would
// have, even above a capacity lowered below it: it then admits nothing
// until it has leaked below the new capacity. Safe while requests are
// decided; when the rate changes, or the capacity crosses a power of two,
// a request admitted before the bucket would have emptied and released
// after the change takes nothing out.
func (b *LeakyBucket) SetLimit(r Rate, capacity int64) error {
	defer policywindow.Changed() // once the new window is in place
	c, err := newLeakyConfig(r, capacity)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.cfg.Load()
	at := old.emptyAt.v.Swap(tatFrozen)
	c.since = old.since
	if at != emptyTAT && (c.unit != old.unit || c.cb != old.cb) {
		// Tickets read otherwise now: every admission so far came before
		// the instant the bucket empties, and its release, cut for the old
		// numbers, takes nothing out. Read the same, a ticket takes out
		// what it put in.
		c.since = time.Duration(at)
	}
	c.emptyAt.v.Store(at)
	b.cfg.Store(c)
	return nil
}

// config returns the current configuration and its state word, waiting out
// a SetLimit that has frozen it and not yet published its successor.
func (b *LeakyBucket) config() (*leakyConfig, int64) {
	for {
		c := b.cfg.Load()
		if at := c.emptyAt.v.Load(); at != tatFrozen {
			return c, at
		}
		runtime.Gosched()
	}
}

// Name returns the limiter's name, "ratelimit/leaky-bucket" unless set with
// WithName.
func (b *LeakyBucket) Name() string { return b.name }

// rateWindow returns the time a full bucket takes to drain, capacity × interval:
// the w of the RateLimit-Policy header field.
func (b *LeakyBucket) rateWindow() time.Duration { return time.Duration(b.cfg.Load().full) }

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
	latency = max(latency, 0)
	admitted := int64(now - latency)
	b.relMu.Lock()
	defer b.relMu.Unlock()
	c := b.cfg.Load()
	if admitted <= int64(c.since) {
		return // admitted before a SetLimit, on another configuration
	}
	cost := int64(uint64(t)&c.cmask) * c.unit
	// The request's last unit leaks out at its admit instant plus the offset
	// kept in the ticket, unless a release since then moved it forward: it
	// has leaked for latency at most, so cost-latency of it is surely left.
	left := max(cost-int64(latency), 0)
	if end := admitted + int64(uint64(t)>>c.cb); end > b.released {
		left = min(end-int64(now), cost)
	}
	if at := c.emptyAt.v.Load(); at != tatFrozen && at != emptyTAT {
		b.released = max(b.released, at)
	}
	tatRefund(&c.emptyAt.v, left, int64(now), nil)
}

// allowNAt decides on a request of cost n at now, taking its quota when it
// is admitted: the bare answer, with no ticket, of the step tables in tests.
func (b *LeakyBucket) allowNAt(now time.Duration, n int64) bool {
	n = max(n, 1)
	for {
		c := b.cfg.Load()
		if n > c.capacity {
			return false
		}
		_, _, res := tatTake(&c.emptyAt.v, int64(now), n*c.unit, c.full)
		if res != tatMoved {
			return res == tatAllowed
		}
		runtime.Gosched() // SetLimit froze the state
	}
}

func (b *LeakyBucket) decide(d *sluice.Decision, now time.Duration, n int64) sluice.Ticket {
	n = max(n, 1)
	for {
		c := b.cfg.Load()
		if n > c.capacity {
			c, at := b.config()
			if n <= c.capacity {
				continue // the capacity grew meanwhile
			}
			base := max(at, int64(now))
			*d = never(b.name, c.capacity, floorDiv(int64(now)+c.full-base, c.unit), time.Duration(base-int64(now)))
			return 0
		}
		base, next, res := tatTake(&c.emptyAt.v, int64(now), n*c.unit, c.full)
		if res == tatMoved {
			runtime.Gosched() // SetLimit froze the state
			continue
		}
		tatDecision(d, b.name, c.capacity, c.unit, c.full, int64(now), base, next, res)
		if res != tatAllowed {
			return 0
		}
		return sluice.Ticket(uint64(next-int64(now))<<c.cb | uint64(n))
	}
}
