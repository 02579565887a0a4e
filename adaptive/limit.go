package adaptive

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// ConcurrencyLimit is a sluice.Policy that bounds the requests in flight at
// once. Its limit is learned from latency by an Algorithm (Gradient by
// default, or AIMD), or is static (Fixed, as NewBulkhead builds).
//
// A request over the limit is rejected with sluice.ErrConcurrencyLimited, or,
// WithQueue, waits in a bounded FIFO queue until a slot frees, its wait runs
// out or its context is done. Requests that end Success or Failure feed the
// algorithm with their latency; Ignored and Released ones only free their
// slot.
//
// Its Decisions carry Limit -1, as a load guard's do: slots in flight are
// no quota over time, and the RateLimit fields the middleware derives from
// a Decision's Limit and Remaining would mislead clients (and hide a rate
// limit's own). Stats reports the current limit and what is in flight.
type ConcurrencyLimit struct {
	name string

	_        [64]byte // inflight is written by every request: a line of its own
	inflight atomic.Int64
	_        [56]byte
	limit    atomic.Int64
	waiting  atomic.Int64
	_        [48]byte

	// Current sampling window, reset when it ends.
	winStart   atomic.Int64
	winCount   atomic.Int64
	winSum     atomic.Int64
	winDrops   atomic.Int64
	winMaxIn   atomic.Int64
	lastAvg    atomic.Int64
	dropAbove  time.Duration
	window     time.Duration
	minSamples int64

	mu  sync.Mutex // ends windows
	est estimator

	qmu     sync.Mutex
	waiters sync.Pool // of *waiter; per limit, so that its channels stay in one synctest bubble
	queue   []*waiter
	qcap    int
	maxWait time.Duration
}

const notStarted = math.MinInt64

type waiter struct {
	ch      chan struct{}
	granted bool
}

// NewConcurrencyLimit returns a ConcurrencyLimit whose limit is learned by
// the Algorithm set WithAlgorithm (default Gradient{}). Its name defaults to
// "adaptive/concurrency".
func NewConcurrencyLimit(opts ...Option) (*ConcurrencyLimit, error) {
	o, err := buildOptions(kindLimit, "adaptive/concurrency", opts)
	if err != nil {
		return nil, err
	}
	if o.algorithm == nil {
		o.algorithm = Gradient{}
	}
	return newLimit(o)
}

// NewBulkhead returns a ConcurrencyLimit with the static limit n: at most n
// requests in flight at once, whatever their latency. Its name defaults to
// "adaptive/bulkhead".
func NewBulkhead(n int, opts ...Option) (*ConcurrencyLimit, error) {
	o, err := buildOptions(kindLimit, "adaptive/bulkhead", opts)
	if err != nil {
		return nil, err
	}
	if o.algorithm != nil {
		return nil, errBulkheadAlgorithm
	}
	o.algorithm = Fixed{Limit: n}
	return newLimit(o)
}

var errBulkheadAlgorithm = errors.New("adaptive: NewBulkhead: a bulkhead's limit is fixed; use NewConcurrencyLimit to choose an algorithm")

func newLimit(o options) (*ConcurrencyLimit, error) {
	est, err := o.algorithm.newEstimator()
	if err != nil {
		return nil, err
	}
	l := &ConcurrencyLimit{name: o.name, est: est, qcap: o.queue, maxWait: o.maxWait}
	l.window, l.minSamples, l.dropAbove = est.settings()
	l.limit.Store(limitOf(est.initial()))
	l.winStart.Store(notStarted)
	return l, nil
}

// limitOf turns an estimator's limit into slots: at least 1, and
// math.MaxInt64 for one too large for an int64 (a float of 2^63, which
// int64 would turn negative).
func limitOf(f float64) int64 {
	if f >= math.MaxInt64 {
		return math.MaxInt64
	}
	return max(int64(f), 1)
}

// Name returns the policy's name.
func (l *ConcurrencyLimit) Name() string { return l.name }

// Admit takes a slot at the monotonic instant now, waiting in the queue if
// there is one and the limit is reached.
func (l *ConcurrencyLimit) Admit(ctx context.Context, now time.Duration) sluice.Verdict {
	if l.takeFree() {
		return sluice.Verdict{Limit: -1}
	}
	d, t := l.admitSlow(ctx)
	if !d.Allowed {
		return sluice.Verdict{Limit: -1, RetryAfter: d.RetryAfter, Cause: d.Cause}
	}
	return sluice.Verdict{Ticket: t, Limit: -1}
}

// takeFree takes a slot if one is free and no request waits for one.
func (l *ConcurrencyLimit) takeFree() bool {
	if l.waiting.Load() != 0 {
		return false
	}
	for {
		cur, lim := l.inflight.Load(), l.limit.Load()
		if cur >= lim {
			return false
		}
		if l.inflight.CompareAndSwap(cur, cur+1) {
			l.noteInflight(cur + 1)
			return true
		}
	}
}

// admitted is the Decision of a request given a slot.
func (l *ConcurrencyLimit) admitted() sluice.Decision {
	return sluice.Decision{Allowed: true, Policy: l.name, Limit: -1}
}

// tryTake takes a slot if one is free.
func (l *ConcurrencyLimit) tryTake() (sluice.Decision, bool) {
	for {
		cur, lim := l.inflight.Load(), l.limit.Load()
		if cur >= lim {
			return sluice.Decision{}, false
		}
		if l.inflight.CompareAndSwap(cur, cur+1) {
			l.noteInflight(cur + 1)
			return l.admitted(), true
		}
	}
}

func (l *ConcurrencyLimit) noteInflight(n int64) {
	for {
		m := l.winMaxIn.Load()
		if n <= m || l.winMaxIn.CompareAndSwap(m, n) {
			return
		}
	}
}

func (l *ConcurrencyLimit) reject() sluice.Decision {
	retry := max(time.Duration(l.lastAvg.Load()), time.Millisecond)
	return sluice.Decision{Policy: l.name, Limit: -1, RetryAfter: retry, Cause: sluice.ErrConcurrencyLimited}
}

func (l *ConcurrencyLimit) admitSlow(ctx context.Context) (sluice.Decision, sluice.Ticket) {
	if l.qcap == 0 {
		if d, ok := l.tryTake(); ok {
			return d, 0
		}
		return l.reject(), 0
	}
	l.qmu.Lock()
	// Count as waiting before looking at the slots, so that a Done freeing
	// one either is seen here or sees this waiter.
	l.waiting.Add(1)
	if len(l.queue) == 0 {
		if d, ok := l.tryTake(); ok {
			l.waiting.Add(-1)
			l.qmu.Unlock()
			return d, 0
		}
	}
	if len(l.queue) >= l.qcap || ctx.Err() != nil {
		l.waiting.Add(-1)
		l.qmu.Unlock()
		return l.reject(), 0
	}
	w := l.getWaiter()
	w.granted = false
	l.queue = append(l.queue, w)
	l.qmu.Unlock()

	var timeout <-chan time.Time
	if l.maxWait > 0 {
		t := time.NewTimer(l.maxWait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-w.ch:
		l.waiters.Put(w)
		return l.admitted(), 0
	case <-ctx.Done():
	case <-timeout:
	}
	l.qmu.Lock()
	if w.granted {
		// The slot came as the wait ended: take it and give it back.
		l.qmu.Unlock()
		<-w.ch
		l.waiters.Put(w)
		l.release()
		return l.reject(), 0
	}
	for i, q := range l.queue {
		if q == w {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			break
		}
	}
	l.waiting.Add(-1)
	l.qmu.Unlock()
	l.waiters.Put(w)
	return l.reject(), 0
}

func (l *ConcurrencyLimit) getWaiter() *waiter {
	if w, ok := l.waiters.Get().(*waiter); ok {
		return w
	}
	return &waiter{ch: make(chan struct{}, 1)}
}

// dispatch hands free slots to waiters, in arrival order.
func (l *ConcurrencyLimit) dispatch() {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	for len(l.queue) > 0 {
		cur := l.inflight.Load()
		if cur >= l.limit.Load() {
			return
		}
		if !l.inflight.CompareAndSwap(cur, cur+1) {
			continue
		}
		l.noteInflight(cur + 1)
		w := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		l.waiting.Add(-1)
		w.granted = true
		w.ch <- struct{}{}
	}
}

func (l *ConcurrencyLimit) release() {
	l.inflight.Add(-1)
	if l.waiting.Load() > 0 {
		l.dispatch()
	}
}

// Done frees the request's slot. A Success or Failure also feeds its latency
// to the algorithm (a Guard hands the call's own latency, without the time it
// waited in this queue); when the sampling window is over, the limit is
// updated.
func (l *ConcurrencyLimit) Done(_ sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	if (o == sluice.Success || o == sluice.Failure) && latency >= 0 {
		l.sample(o, now, latency)
	}
	l.release()
}

// Needs declares sluice.Waits when the limit has a queue, so a Guard
// measures the latency of calls from the end of their wait, and
// sluice.NeedsEnd unless the limit is fixed (NewBulkhead, Fixed), which no
// latency moves: its Stats' AvgRT then stays 0 in a Guard.
func (l *ConcurrencyLimit) Needs() sluice.Needs {
	var n sluice.Needs
	if l.qcap > 0 {
		n |= sluice.Waits
	}
	if _, ok := l.est.(*fixed); !ok {
		n |= sluice.NeedsEnd
	}
	return n
}

func (l *ConcurrencyLimit) sample(o sluice.Outcome, now, latency time.Duration) {
	start := l.winStart.Load()
	if start == notStarted {
		if !l.winStart.CompareAndSwap(notStarted, int64(now)) {
			start = l.winStart.Load()
		} else {
			start = int64(now)
		}
	}
	// A sample that ends after the window is over first closes it, then
	// opens the next one.
	if now-time.Duration(start) >= l.window && l.winCount.Load() >= l.minSamples {
		l.endWindow(now)
	}
	l.winCount.Add(1)
	l.winSum.Add(int64(max(latency, 0)))
	if o == sluice.Failure || latency > l.dropAbove {
		l.winDrops.Add(1)
	}
}

func (l *ConcurrencyLimit) endWindow(now time.Duration) {
	if !l.mu.TryLock() {
		return // another Done is ending it
	}
	defer l.mu.Unlock()
	start := l.winStart.Load()
	if start == notStarted || now-time.Duration(start) < l.window || l.winCount.Load() < l.minSamples {
		return
	}
	l.winStart.Store(int64(now))
	count := l.winCount.Swap(0)
	sum := l.winSum.Swap(0)
	s := windowSample{
		count:       count,
		drops:       l.winDrops.Swap(0),
		maxInflight: l.winMaxIn.Swap(l.inflight.Load()),
	}
	if count > 0 {
		s.avg = time.Duration(sum / count)
	}
	l.lastAvg.Store(int64(s.avg))
	old := l.limit.Load()
	next := limitOf(l.est.update(s))
	l.limit.Store(next)
	if next > old && l.waiting.Load() > 0 {
		l.dispatch()
	}
}

// LimitStats is a snapshot of a ConcurrencyLimit.
type LimitStats struct {
	// Limit is the current limit.
	Limit int64
	// Inflight is the number of requests holding a slot.
	Inflight int64
	// Waiting is the number of requests in the queue.
	Waiting int64
	// AvgRT is the average latency of the last window that ended; 0 before
	// the first, and for a fixed limit in a Guard that reads no end instant
	// (see UntimedOf).
	AvgRT time.Duration
	// Baseline is the Gradient algorithm's unloaded latency; 0 for the
	// others and before the first window.
	Baseline time.Duration
	// Probing is true while a Gradient limit runs a probe window at half
	// its limit.
	Probing bool
}

// Stats returns a snapshot of the limit.
func (l *ConcurrencyLimit) Stats() LimitStats {
	l.mu.Lock()
	base, probing := l.est.baseline(), l.est.probing()
	l.mu.Unlock()
	return LimitStats{
		Limit:    l.limit.Load(),
		Inflight: l.inflight.Load(),
		Waiting:  l.waiting.Load(),
		AvgRT:    time.Duration(l.lastAvg.Load()),
		Baseline: base,
		Probing:  probing,
	}
}
