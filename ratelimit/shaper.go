package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/nowait"
)

// errWaitAbandoned is the cause of a Shaper's rejection when the request's
// context ended while it waited for its turn. It wraps sluice.ErrRateLimited;
// the Decision's Cause also matches the context's error (context.Canceled or
// context.DeadlineExceeded), which is how callers tell it.
var errWaitAbandoned = fmt.Errorf("%w: the context ended while the request waited for its turn", sluice.ErrRateLimited)

var (
	errAbandonedCanceled = fmt.Errorf("%w (%w)", errWaitAbandoned, context.Canceled)
	errAbandonedDeadline = fmt.Errorf("%w (%w)", errWaitAbandoned, context.DeadlineExceeded)
)

// Shaper is the leaky bucket as a queue: it spaces requests evenly at its
// Rate, one every interval T = Period/Count (rounded up), and makes each
// request wait for its turn instead of rejecting it, up to a maximum wait.
// It smooths bursts into a steady flow, as Sentinel's throttling controller
// and nginx's limit_req with a queue do.
//
// A request of cost n takes the turn at max(next, now) and moves next by n×T.
// It is rejected at once, taking nothing, when its turn lies further than the
// maximum wait or beyond its context's deadline. A request whose context ends
// while it waits gives its turn back when no later request queued behind it;
// a turn in the middle of the queue stays empty, since the requests behind it
// were promised their instants.
//
// As a sluice.Policy, Admit blocks until the turn, on a timer that follows
// fake time inside a testing/synctest bubble; a turn due exactly at the
// context's deadline is kept. A decision allocates nothing, except the timer
// of a request that has to wait.
//
// Decision.Limit is the queue's length in unit requests, maxWait/T + 1;
// Remaining is how many more unit requests would be admitted at the instant
// of the decision; Reset is the time until the queue is empty.
//
// The state is one atomic int64 on its own cache line. Create one with
// NewShaper; the zero value is not usable. A Shaper is safe for concurrent
// use.
type Shaper struct {
	cfg  atomic.Pointer[shaperConfig]
	mu   sync.Mutex // serialises SetLimit
	name string
}

// shaperConfig is one configuration of a Shaper with its own state word;
// SetLimit moves the state to a new one and freezes the old word, so a
// decision racing with the change retries on the new configuration.
type shaperConfig struct {
	next    paddedTAT // the instant the next turn is free; tatFrozen once replaced
	iv      int64
	maxWait int64
	limit   int64
	// A ticket carries the delay from the request's Admit to its turn, at
	// most maxWait, in its high bits, and the request's cost in the low cb =
	// 64 - bits.Len64(maxWait) ones (cmask).
	cb    uint
	cmask uint64
	rate  Rate
	since time.Duration // the instant SetLimit made it; releases of earlier admissions are dropped
}

// NewShaper returns a Shaper spacing requests at r, each waiting at most
// maxWait for its turn (0: never wait, only admit a request whose turn is
// now). It returns an error when r is invalid or spaces requests more than
// 2^61ns (73 years) apart, or when maxWait is negative or above 2^61ns: the
// queue, at most a wait and a cost long, then always fits in an int64.
func NewShaper(r Rate, maxWait time.Duration, opts ...Option) (*Shaper, error) {
	c, err := newShaperConfig(r, maxWait)
	if err != nil {
		return nil, err
	}
	o, err := buildOptions("shaper", false, opts)
	if err != nil {
		return nil, err
	}
	c.since = math.MinInt64
	c.next.v.Store(emptyTAT)
	s := &Shaper{name: o.name}
	s.cfg.Store(c)
	return s, nil
}

func newShaperConfig(r Rate, maxWait time.Duration) (*shaperConfig, error) {
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("ratelimit: shaper: %w", err)
	}
	if interval(r) > maxQueueSpan {
		return nil, fmt.Errorf("ratelimit: shaper: rate %v spaces requests more than 2^61ns apart", r)
	}
	if maxWait < 0 {
		return nil, fmt.Errorf("ratelimit: shaper: maximum wait %v must not be negative", maxWait)
	}
	if int64(maxWait) > maxQueueSpan {
		return nil, errors.New("ratelimit: shaper: maximum wait exceeds 2^61ns")
	}
	iv := interval(r)
	cb := uint(64 - bits.Len64(uint64(maxWait)))
	return &shaperConfig{iv: iv, maxWait: int64(maxWait), limit: int64(maxWait)/iv + 1, cb: cb, cmask: 1<<cb - 1, rate: r}, nil
}

// SetLimit changes the rate and the maximum wait, validated as NewShaper
// validates them: on an error nothing changes. Turns already taken keep their instants; the next turn is free
// when the last one taken ends, and is then spaced at the new rate. A
// shaper that never waits (maxWait 0) cannot be given a wait, nor one that
// waits be made never to: a Guard asks once whether its Admit may block.
// Safe while requests are decided; when the rate changes, or the maximum
// wait crosses a power of two, a request admitted before the last turn
// taken ends and released after the change gives nothing back.
func (s *Shaper) SetLimit(r Rate, maxWait time.Duration) error {
	c, err := newShaperConfig(r, maxWait)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cfg.Load()
	if (old.maxWait > 0) != (maxWait > 0) {
		return fmt.Errorf("ratelimit: shaper: SetLimit cannot change a maximum wait of %v to %v: whether Admit waits is fixed", time.Duration(old.maxWait), maxWait)
	}
	next := old.next.v.Swap(tatFrozen)
	c.since = old.since
	if next != emptyTAT && (c.iv != old.iv || c.cb != old.cb) {
		// Turns and tickets read otherwise now: every admission so far
		// came before the end of the last turn taken, and its release,
		// cut for the old numbers, gives nothing back. Read the same, a
		// ticket gives back its turn.
		c.since = time.Duration(next)
	}
	c.next.v.Store(next)
	s.cfg.Store(c)
	return nil
}

// config returns the current configuration, waiting out a SetLimit that
// has frozen it and not yet published its successor.
func (s *Shaper) config() *shaperConfig {
	for {
		c := s.cfg.Load()
		if c.next.v.Load() != tatFrozen {
			return c
		}
		runtime.Gosched()
	}
}

// wholeAfter returns how long the Shaper, left idle, takes to have its
// queue empty: its longest wait, and one turn of a unit request (see
// Keyed's idle TTL).
func (s *Shaper) wholeAfter() time.Duration {
	c := s.cfg.Load()
	return time.Duration(c.maxWait + c.iv)
}

// wholeAt reports whether the Shaper's queue is empty at now: its next
// turn is free by then (see Keyed's idle TTL).
func (s *Shaper) wholeAt(now time.Duration) bool {
	next := s.config().next.v.Load()
	return next == emptyTAT || next <= int64(now)
}

// Name returns the name given with WithName; default "ratelimit/shaper".
func (s *Shaper) Name() string { return s.name }

// take claims the turn at max(next, now) for cost n when it starts within
// maxDelay of now. It returns the turn's start and end, or, when it does not,
// the start it would have had.
func (s *Shaper) take(now, n, maxDelay int64) (c *shaperConfig, start, end int64, ok bool) {
	c = s.cfg.Load()
	for {
		next := c.next.v.Load()
		if next == tatFrozen {
			runtime.Gosched() // SetLimit moved the state: take the turn on the new one
			c = s.cfg.Load()
			continue
		}
		start = max(next, now)
		if start-now > maxDelay {
			return c, start, 0, false
		}
		end = start + n*c.iv
		if c.next.v.CompareAndSwap(next, end) {
			return c, start, end, true
		}
	}
}

// giveBack returns the turn [start, end) when it is still the last one.
func (s *shaperConfig) giveBack(start, end int64) {
	s.next.v.CompareAndSwap(end, start)
}

// remaining is how many unit requests would still be admitted at instant at
// when the queue ends at end.
func (s *shaperConfig) remaining(at, end int64) int64 {
	if end-at > s.maxWait {
		return 0
	}
	return floorDiv(at+s.maxWait-end, s.iv) + 1
}

// maxQueueSpan bounds a Shaper's wait and a request's cost, each: a turn
// starts at most a wait after now and lasts at most a cost, so its end stays
// within 2^62ns of now.
const maxQueueSpan = maxTolerance / 2

// tooCostly reports whether n × T spans more than maxQueueSpan: such a cost
// is never satisfiable.
func (s *shaperConfig) tooCostly(n int64) bool { return n > maxQueueSpan/s.iv }

func (s *Shaper) never(c *shaperConfig, now int64) sluice.Decision {
	end := max(c.next.v.Load(), now)
	return never(s.name, c.limit, c.remaining(now, end), time.Duration(end-now))
}

// allowNAt decides on a request of cost n at now, taking its quota when it
// is admitted: the bare answer, with no ticket, of the step tables in tests.
func (s *Shaper) allowNAt(now time.Duration, n int64) bool {
	n = max(n, 1)
	if s.cfg.Load().tooCostly(n) {
		return false
	}
	_, _, _, ok := s.take(int64(now), n, 0)
	return ok
}

// decideWithin takes a turn starting within maxDelay of now and builds the
// Decision as of the turn's start. A rejection's cause is cause, or
// ErrRateLimited when nil.
func (s *Shaper) decideWithin(now, n, maxDelay int64, cause error) (*shaperConfig, sluice.Decision, [2]int64) {
	c, start, end, ok := s.take(now, n, maxDelay)
	if !ok {
		d := reject(s.name, c.limit, c.remaining(now, start), time.Duration(start-now), time.Duration(start-now-maxDelay))
		if cause != nil {
			d.Cause = cause
		}
		return c, d, [2]int64{}
	}
	return c, allow(s.name, c.limit, c.remaining(start, end), time.Duration(end-start)), [2]int64{start, end}
}

// admitD decides as Admit does, with its answer as a Decision.
func (s *Shaper) admitD(ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	n := sluice.CostFrom(ctx)
	if c := s.config(); c.tooCostly(n) {
		return s.never(c, int64(now)), 0
	}
	if err := ctx.Err(); err != nil {
		// The caller is gone already: take no turn it would not use.
		c := s.cfg.Load()
		d := reject(s.name, c.limit, 0, 0, time.Duration(c.iv))
		d.Cause = errAbandonedCanceled
		if errors.Is(err, context.DeadlineExceeded) {
			d.Cause = errAbandonedDeadline
		}
		return d, 0
	}
	c, d, turn := s.wait(ctx, int64(now), n)
	if !d.Allowed {
		return d, 0
	}
	if uint64(n) > c.cmask {
		return d, 0 // too large to carry: a release gives nothing back (see Done)
	}
	// The turn starts within maxWait of now, so the delay fits its bits.
	return d, sluice.Ticket(uint64(turn[0]-int64(now))<<c.cb | uint64(n))
}

// wait takes a turn for cost n arriving at now and sleeps until it.
func (s *Shaper) wait(ctx context.Context, now, n int64) (*shaperConfig, sluice.Decision, [2]int64) {
	// Under a deadline, one instant for its room and the wait's start, so
	// that a turn the room admits is not given up by the wait.
	var start time.Time
	budget := s.cfg.Load().maxWait
	var cause error
	if dl, ok := ctx.Deadline(); ok {
		start = time.Now()
		if left := int64(dl.Sub(start)); left < budget {
			budget, cause = left, ErrWouldExceedDeadline
		}
	}
	c, d, turn := s.decideWithin(now, n, max(budget, -1), cause)
	if !d.Allowed {
		return c, d, turn
	}
	delay := turn[0] - now
	if delay <= 0 || nowait.Is(ctx) {
		// In shadow mode the turn is taken as when enforcing, so that what
		// it rejects is what enforcement would, but the call goes on now.
		return c, d, turn
	}
	if start.IsZero() {
		start = time.Now()
	}
	timer := time.NewTimer(time.Duration(delay))
	defer timer.Stop()
	select {
	case <-timer.C:
		return c, d, turn
	case <-ctx.Done():
		// The timer's own clock says whether the turn came as ctx ended
		// (Stop cannot: it stops a timer whose value was not received).
		if time.Since(start) >= time.Duration(delay) {
			return c, d, turn // it is taken
		}
		c.giveBack(turn[0], turn[1])
		cause := errAbandonedCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cause = errAbandonedDeadline
		}
		d = reject(s.name, c.limit, d.Remaining, d.Reset, time.Duration(delay))
		d.Cause = cause
		return c, d, [2]int64{}
	}
}

// Done gives back, on sluice.Released, the turn that Admit took, when no
// later request has queued behind it; other outcomes change nothing. now -
// latency must be the instant given to Admit, as a Guard passes it. The
// ticket carries the request's cost in 64 - b bits, b the bit length of
// maxWait in nanoseconds, so a request of a cost of 2^(64-b) or more gives
// nothing back: 2^34 with a maximum wait of a second, 2^22 with an hour; a
// shaper that never waits carries every cost.
func (s *Shaper) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	if o != sluice.Released || t == 0 {
		return
	}
	c := s.cfg.Load()
	if now-max(latency, 0) <= c.since {
		return // admitted before a SetLimit, on another configuration
	}
	n := int64(uint64(t) & c.cmask)
	start := int64(now-latency) + int64(uint64(t)>>c.cb)
	c.giveBack(start, start+n*c.iv)
}
