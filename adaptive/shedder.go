package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/listen"
	"github.com/sluice-go/sluice/internal/nowait"
	"github.com/sluice-go/sluice/internal/shedhook"
)

// The states a Shedder reports to its subscribers.
const (
	// StateNormal: the Shedder has rejected nothing for a second.
	StateNormal = "normal"
	// StateShedding: the Shedder rejected a request less than a second ago.
	StateShedding = "shedding"
)

var (
	_ sluice.Policy      = (*Shedder)(nil)
	_ sluice.StateSource = (*Shedder)(nil)
)

// Shedder keeps a service from overload by bounding the requests it runs at
// once, a sluice.Policy. NewShedder learns the bound from the latency of the
// requests it admits, with no figure about the service to tell; NewBulkhead
// fixes it. Requests over the bound wait in a short queue (CoDel with
// adaptive LIFO) or are rejected; the package doc explains how.
//
// A Shedder from NewShedder rejects with sluice.ErrOverloaded (503 in the
// adapters) and a RetryAfter of 1 s; a bulkhead with
// sluice.ErrConcurrencyLimited and a RetryAfter of about one latency of its
// calls, at most 1 s. Requests
// marked sluice.PriorityCritical are served first from the queue and wait
// longest. Decisions carry Limit -1: slots in flight are no quota over
// time. Requests ending Success feed the limit with their latency, and
// those ending Failure or Ignored no quicker than the baseline (see the
// package doc); Released ones only free their slot.
//
// It implements sluice.StateSource ("normal" and "shedding").
type Shedder struct {
	name  string
	cause error
	// abandoned is the answer to a caller gone (its context canceled)
	// while it waited in the queue, or before it could: cause, and
	// context.Canceled.
	abandoned error
	est       *gradient // nil for a bulkhead
	procs     int64     // GOMAXPROCS when it was made
	// pred is the Shedder this one took the place of (see carried), until
	// its calls in flight have ended; succ, the one that took this one's.
	pred, succ atomic.Pointer[Shedder]

	_        [64]byte // inflight is written by every request: a line of its own
	inflight atomic.Int64
	_        [56]byte
	limit    atomic.Int64
	waiting  atomic.Int64
	_        [48]byte

	// The current sampling window, ended by the first Done after it is over;
	// for a bulkhead, winStart is the start of a call that ended lately
	// (see noteStart).
	winStart atomic.Int64
	winCount atomic.Int64
	winSum   atomic.Int64
	winMaxIn atomic.Int64
	// winBound counts the window's samples that are bounds, not
	// measures: a call a deadline ended, a client that went away.
	winBound atomic.Int64
	winSq    atomic.Int64 // the sum of the squares of the latencies, in µs² (see sample)
	lastAvg  atomic.Int64
	// base is the baseline after the last window, for Done to read.
	base atomic.Int64
	// served is how many requests a second the last window that was not a
	// probe measured (those that ended, Released ones apart, sampled or
	// not); 0 before the first. unsampled counts the window's ends of
	// those that fed it no sample (quick failures, quick ignored ones).
	served    atomic.Int64
	unsampled atomic.Int64
	mu        sync.Mutex // ends windows
	// epoch counts the probes' starts and ends; an admission's ticket is the
	// epoch it was admitted in.
	epoch   atomic.Uint64
	probing atomic.Bool
	cohort  cohort // a probe's sample

	q *queue // nil without a queue

	shedding atomic.Bool
	lastShed atomic.Int64

	smu        sync.Mutex
	subs       map[uint64]func(sluice.StateChange)
	nextSub    uint64
	pending    []sluice.StateChange
	delivering bool
}

const notStarted = math.MinInt64

// shedCoolOff is how long a Shedder reports "shedding" after a rejection.
const shedCoolOff = time.Second

// NewShedder returns a Shedder whose limit is learned from latency, with a
// queue of up to 1000 requests waiting at most 200 ms (see WithQueue). Its
// name defaults to "adaptive/shedder".
func NewShedder(opts ...Option) (*Shedder, error) {
	o, err := buildOptions("adaptive/shedder", opts)
	if err != nil {
		return nil, err
	}
	if !o.queueSet {
		o.queue, o.maxWait = 1000, 200*time.Millisecond
	}
	est := newGradient(runtime.GOMAXPROCS(0))
	s := newShedder(o, sluice.ErrOverloaded, est.current())
	s.est = est
	return s, nil
}

// NewBulkhead returns a Shedder with the static limit n: at most n requests
// in flight at once, whatever their latency, and no queue unless
// WithQueue. Its name defaults to "adaptive/bulkhead".
func NewBulkhead(n int, opts ...Option) (*Shedder, error) {
	if n < 1 {
		return nil, errBulkheadLimit
	}
	o, err := buildOptions("adaptive/bulkhead", opts)
	if err != nil {
		return nil, err
	}
	return newShedder(o, sluice.ErrConcurrencyLimited, int64(n)), nil
}

var errBulkheadLimit = errors.New("adaptive: NewBulkhead: the limit must be at least 1")

func newShedder(o options, cause error, limit int64) *Shedder {
	s := &Shedder{name: o.name, cause: cause, procs: int64(runtime.GOMAXPROCS(0)), subs: map[uint64]func(sluice.StateChange){}}
	s.abandoned = fmt.Errorf("%w: the caller went away while the request waited in the queue (%w)", cause, context.Canceled)
	s.limit.Store(limit)
	s.winStart.Store(notStarted)
	if o.queue > 0 {
		s.q = &queue{size: o.queue, maxWait: o.maxWait, late: -1}
	}
	return s
}

// Name returns the Shedder's name.
func (s *Shedder) Name() string { return s.name }

// Admit takes a slot at the monotonic instant now, waiting in the queue
// when the limit is reached. It answers Quota{Limit: -1}: no quota.
func (s *Shedder) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if s.shedding.Load() {
		s.recover(now)
	}
	if s.takeFree(now) {
		s.yield()
		return s.ticket(now), sluice.Quota{Limit: -1}, nil
	}
	at, ok := s.admitSlow(ctx, now)
	if ok {
		return s.ticket(at), sluice.Quota{Limit: -1}, nil
	}
	if s.q != nil && errors.Is(ctx.Err(), context.Canceled) {
		// The caller went away while it waited, or before it could: it
		// was not shed, and its rejection moves nothing. A deadline that
		// ran out in the queue is a shed: no slot came in time.
		return 0, sluice.Quota{Limit: -1}, s.abandoned
	}
	return s.reject(at) // when its wait ran out, if it waited
}

// yield lets the goroutines already runnable run before a request that
// took a slot at once, when the Shedder has a queue. On a server bound by
// its CPU, Go runs a request's handler to its end, and the goroutines that
// read new requests wait for a processor behind it: the queue would form
// there, where no middleware sees it, and the limit would see no latency
// rise. Behind the others, the request's own wait for a processor is part of
// its latency, counted from the instant it took its slot (see ticket), and
// the requests read meanwhile find the slots taken and wait in the Shedder's
// queue, under its discipline.
//
// It yields only when the requests in flight are as many as the processors
// or more: below that a processor is left for the readers, and the yield
// would only cost time.
func (s *Shedder) yield() {
	if s.q != nil && s.inflight.Load() >= s.procs {
		runtime.Gosched()
	}
}

// A Ticket holds the instant its request took its slot, in its low
// ticketBits bits (in ns, modulo 2^ticketBits: 78 hours), the epoch it
// was admitted in above them (modulo 2^epochBits), and in its top bits,
// for a request of a probe's cohort, its place in it plus one.
const (
	ticketBits = 48
	epochBits  = 12
	slotShift  = ticketBits + epochBits
)

func (s *Shedder) ticket(granted time.Duration) sluice.Ticket {
	e := s.epoch.Load()
	t := (e&(1<<epochBits-1))<<ticketBits | uint64(granted)&(1<<ticketBits-1)
	if s.probing.Load() {
		if i, ok := s.cohort.claim(e, granted); ok {
			t |= uint64(i+1) << slotShift
		}
	}
	return sluice.Ticket(t)
}

// ofEpoch reports whether t was admitted in the current epoch.
func (s *Shedder) ofEpoch(t sluice.Ticket) bool {
	return uint64(t)>>ticketBits&(1<<epochBits-1) == s.epoch.Load()&(1<<epochBits-1)
}

// sinceGrant returns the time from the instant t's request took its slot to
// now.
func sinceGrant(t sluice.Ticket, now time.Duration) time.Duration {
	const mask = 1<<ticketBits - 1
	d := (uint64(now) - uint64(t)) & mask
	if d > mask/2 { // now before the grant: instants not from one clock
		return -1
	}
	return time.Duration(d)
}

// Needs declares sluice.Waits when the Shedder has a queue, so that a
// Guard measures the latency of its calls from the end of their wait, and
// sluice.NeedsEnd for a learnt limit, which learns from that latency; a
// bulkhead's limit no latency moves (its Stats' AvgRT then stays 0).
func (s *Shedder) Needs() sluice.Needs {
	var n sluice.Needs
	if s.q != nil {
		n |= sluice.Waits
	}
	if s.est != nil {
		n |= sluice.NeedsEnd
	}
	return n
}

// takeFree takes a slot at now if one is free and no request waits for
// one.
func (s *Shedder) takeFree(now time.Duration) bool {
	if s.waiting.Load() != 0 {
		return false
	}
	took, gaveBack := s.tryTake()
	if gaveBack {
		s.woken(now)
	}
	return took
}

// tryTake takes a slot if one is free. gaveBack reports a slot taken that
// did not hold (see holds) and was given back: the waiters it may have
// turned away meanwhile are to be woken (woken) once no queue's lock is
// held.
func (s *Shedder) tryTake() (took, gaveBack bool) {
	for {
		cur := s.inflight.Load()
		ahead, lim := s.ahead(s.limit.Load())
		others := s.carried() + ahead
		if cur+others >= lim {
			return false, false
		}
		if s.inflight.CompareAndSwap(cur, cur+1) {
			if !s.holds(lim) {
				s.inflight.Add(-1)
				return false, true
			}
			s.noteInflight(cur + 1 + others)
			return true, false
		}
	}
}

// woken hands a slot given back at now to the waiters of this Shedder and
// of its chain, as a release does.
func (s *Shedder) woken(now time.Duration) {
	if s.q != nil && s.waiting.Load() > 0 {
		s.dispatch(now)
	}
	s.wakeChain(now)
}

// holds reports whether a slot just taken holds beside the calls of the
// Shedders of its chain (see carried), read again once it is taken: two
// calls taking the last slot at once, one on each side of a reload, each
// read the other's count before the other took it. One of them, at least,
// sees the other's now, and gives its slot back. Without a chain it is
// true at once.
func (s *Shedder) holds(lim int64) bool {
	if s.pred.Load() == nil && s.succ.Load() == nil {
		return true
	}
	ahead, lim := s.ahead(lim)
	return s.inflight.Load()+s.carried()+ahead <= lim
}

func (s *Shedder) noteInflight(n int64) {
	for {
		m := s.winMaxIn.Load()
		if n <= m || s.winMaxIn.CompareAndSwap(m, n) {
			return
		}
	}
}

// admitSlow takes a slot, waiting in the queue for one if need be, and
// reports whether it got one, and the instant it did (or, without one, the
// instant its wait ran out; now when it did not wait or wait out).
func (s *Shedder) admitSlow(ctx context.Context, now time.Duration) (time.Duration, bool) {
	if s.q == nil {
		took, gaveBack := s.tryTake()
		if gaveBack {
			s.woken(now)
		}
		return now, took
	}
	q := s.q
	q.mu.Lock()
	// Count as waiting before looking at the slots, so that a Done freeing
	// one either is seen here or sees this waiter.
	s.waiting.Add(1)
	took, gaveBack := false, false
	if q.len() == 0 {
		took, gaveBack = s.tryTake()
	}
	if took {
		s.waiting.Add(-1)
		q.mu.Unlock()
		s.yield()
		return now, true
	}
	var w *waiter
	var wait time.Duration
	if ctx.Err() == nil && !nowait.Is(ctx) { // in shadow mode, no slot at once is a rejection
		w, wait = q.enqueue(now, critical(ctx), s.served.Load())
	}
	if w == nil {
		s.waiting.Add(-1)
		q.mu.Unlock()
		if gaveBack {
			s.woken(now)
		}
		return now, false
	}
	q.mu.Unlock()
	if gaveBack {
		s.woken(now) // its own waiters too: this one among them
	}
	return q.await(ctx, w, now, wait, &s.waiting, s.release)
}

// unknownInstant stands for the instant of a slot freed when none is known:
// a Reconfigure's, or a release by a Done that carries its call's start
// (latency -1), not the present. A waiter granted it measures the instant
// itself, as it measures a wait run out.
const unknownInstant = time.Duration(math.MinInt64)

// bulkNote is how often a bulkhead notes the instant a call that ended had
// started, and bulkRetryMax its longest RetryAfter.
const (
	bulkNote     = time.Millisecond
	bulkRetryMax = time.Second
)

// noteStart notes start, the instant a bulkhead's call that just ended
// started, at most once per bulkNote of starts: so that calls on many
// cores do not all write one cache line, and so that the Guard need not
// read its clock at their end (with latency -1, Done's now is the start).
func (s *Shedder) noteStart(start time.Duration) {
	if last := s.winStart.Load(); last == notStarted || int64(start)-last >= int64(bulkNote) {
		s.winStart.CompareAndSwap(last, int64(start))
	}
}

// reject returns Admit's answer for a request rejected at now, and notes the
// rejection. A bulkhead's RetryAfter is about one latency of its calls:
// the time since the start of a call that ended lately, which is full
// when it rejects (at least 1 ms; at most bulkRetryMax, which is also the
// answer before any call has ended, or after a long quiet spell).
func (s *Shedder) reject(now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	retry := time.Second
	if s.est == nil {
		retry = bulkRetryMax
		if start := s.winStart.Load(); start != notStarted {
			retry = min(max(now-time.Duration(start), time.Millisecond), bulkRetryMax)
		}
	}
	s.noteShed(now)
	return 0, sluice.Quota{Limit: -1, RetryAfter: retry}, s.cause
}

// dispatch hands free slots to waiters, at the instant now.
func (s *Shedder) dispatch(now time.Duration) {
	if s.grant(now) {
		s.wakeChain(now)
	}
}

// grant hands the free slots to the waiters, under the queue's lock. It
// reports whether it took a slot that did not hold (see holds) and gave it
// back: the Shedders of the chain may have turned waiters away meanwhile,
// and are woken once the lock is let go.
func (s *Shedder) grant(now time.Duration) bool {
	q := s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.len() > 0 {
		cur := s.inflight.Load()
		ahead, lim := s.ahead(s.limit.Load())
		others := s.carried() + ahead
		if cur+others >= lim {
			return false
		}
		if !s.inflight.CompareAndSwap(cur, cur+1) {
			continue
		}
		if !s.holds(lim) {
			s.inflight.Add(-1)
			return true
		}
		s.noteInflight(cur + 1 + others)
		w := q.next()
		s.waiting.Add(-1)
		// Its slot from now, never before it came (a Guard tells its outer
		// policies a call's end after the inner ones, at the instant read
		// before them); granted with no instant known (a Reconfigure's, a
		// release's of an untimed call), the waiter measures it (see await).
		w.granted, w.grant = true, now
		if now != unknownInstant {
			w.grant = max(now, w.at)
		}
		w.ch <- struct{}{}
	}
	return false
}

// release frees a slot at the instant now: of this Shedder, and of the
// one that took its place (see carried).
func (s *Shedder) release(now time.Duration) {
	s.inflight.Add(-1)
	if s.waiting.Load() > 0 {
		s.dispatch(now)
	}
	s.wakeChain(now)
}

// wakeChain hands a slot freed at now to the waiters of the Shedders that
// took this one's place and of those it took the place of, which count its
// calls.
func (s *Shedder) wakeChain(now time.Duration) {
	for n := s.succ.Load(); n != nil; n = n.succ.Load() {
		if n.q != nil && n.waiting.Load() > 0 {
			n.dispatch(now)
		}
	}
	for p := s.pred.Load(); p != nil; p = p.pred.Load() {
		if p.q != nil && p.waiting.Load() > 0 {
			p.dispatch(now) // it counts this one's calls (see ahead)
		}
	}
}

// carried returns the calls in flight of the Shedders this one took the
// place of, which hold its slots as its own calls do: a rules reload that
// makes a bulkhead anew must not let the backend see its old calls and a
// full new limit at once. A predecessor drained is kept, since a request
// that read the old rules may still reach it; the chain is cut past
// maxCarried (see Carry). Without one it costs an atomic load.
func (s *Shedder) carried() int64 {
	var n int64
	for p := s.pred.Load(); p != nil; p = p.pred.Load() {
		n += p.inflight.Load()
	}
	return n
}

// maxCarried is how many predecessors a Shedder counts at least: those
// made anew more reloads ago, once drained, are taken to serve no request
// any more.
const maxCarried = 4

// ahead returns the calls in flight of the Shedders that took this one's
// place, and lim lowered to the least of their limits: a call that still
// reaches this one (a request that read the old rules) must not run
// beside a full successor, nor past the limit of the rules that replaced
// its own (a bulkhead of 10 made anew with 2 runs at most 2). Without one
// it costs an atomic load.
func (s *Shedder) ahead(lim int64) (int64, int64) {
	var n int64
	for m := s.succ.Load(); m != nil; m = m.succ.Load() {
		n += m.inflight.Load()
		lim = min(lim, m.limit.Load())
	}
	return n, lim
}

func init() {
	shedhook.CutShort = func(p any, t uint64, o uint8, now, latency time.Duration) bool {
		s, ok := p.(*Shedder)
		if ok {
			s.done(sluice.Ticket(t), sluice.Outcome(o), now, latency, true)
		}
		return ok
	}
	shedhook.Carry = func(from, to any) {
		f, t := from.(*Shedder), to.(*Shedder)
		if f != t {
			t.pred.Store(f)
			f.succ.Store(t)
			m := t
			for range maxCarried {
				if m = m.pred.Load(); m == nil {
					return
				}
			}
			// Past maxCarried the idle Shedders are skipped: one with a
			// call in flight five reloads ago keeps its slot held, and
			// the chain stays short while that call runs. One with a
			// request waiting in its queue is kept, so that the ends of
			// the calls it counts wake it. (One skipped that a request
			// still reaches later, and must queue at, waits for its own
			// calls' and its successors' ends, not its predecessors'.)
			p := m.pred.Load()
			for p != nil && p.inflight.Load() == 0 && p.waiting.Load() == 0 {
				p = p.pred.Load()
			}
			m.pred.Store(p)
		}
	}
}

// Done frees the request's slot and feeds its latency to the limit (a
// Success's; a Failure's or an Ignored one's no quicker than the baseline,
// as at most 4 baselines); when the sampling window is over, the limit is
// updated.
func (s *Shedder) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	s.done(t, o, now, latency, false)
}

// done is Done; cut tells a call that a deadline ended, whose latency is a
// bound, as an ignored call's is (its client gone).
func (s *Shedder) done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration, cut bool) {
	if s.est == nil {
		if o == sluice.Success || o == sluice.Failure {
			s.noteStart(now - max(latency, 0))
		}
		if latency < 0 {
			now = unknownInstant // the call's start, not the present (see noteStart)
		}
		s.release(now)
		return
	}
	if s.probing.Load() {
		// A probe measures its cohort only: the first requests admitted
		// since it began, each to its end (see cohort).
		if i := int(uint64(t) >> slotShift); i > 0 && s.ofEpoch(t) && s.cohort.holds(i-1, t) {
			lat := time.Duration(-1) // ended, measuring nothing
			bound := false
			if o != sluice.Released && latency >= 0 {
				latency = max(latency, sinceGrant(t, now))
				if o == sluice.Success {
					lat = latency
				} else if base := time.Duration(s.base.Load()); base > 0 && latency >= base {
					lat, bound = min(latency, censorCap*base), cut || o == sluice.Ignored
				}
			}
			s.cohort.end(i-1, lat, bound)
		}
		if s.cohort.over(now, s.probeWait()) {
			s.endWindow(now)
		}
		s.release(now)
		return
	}
	if o != sluice.Released && latency >= 0 {
		// The latency the limit learns from runs from the instant the
		// request took its slot: it includes its wait for a processor
		// after that, which the Guard's latency, from the end of Admit,
		// does not.
		latency = max(latency, sinceGrant(t, now))
		// A success's latency is the service's. A failure's or an
		// ignored call's (its client gone, an inner rejection) counts only
		// when no quicker than the baseline: a slow one held its slot that
		// long (at least: a client that gave up cut it short), and shows a
		// queue; a quick one (a connection refused) says nothing of the
		// service's unqueued latency, and a run of them would set the
		// baseline under it, to shed a healthy load once they stop.
		if o == sluice.Success {
			s.sample(now, latency)
		} else if base := time.Duration(s.base.Load()); base > 0 && latency >= base {
			// At most censorCap baselines: a client that gave up after a
			// second among requests of a few milliseconds would otherwise
			// set the window's average alone, where a window of such ends
			// cuts the limit as deep at that cap.
			s.sample(now, min(latency, censorCap*base))
			if cut || o == sluice.Ignored {
				s.winBound.Add(1)
			}
		} else {
			s.unsampled.Add(1) // served all the same: the queue judges by it
		}
	}
	s.release(now)
}

// censorCap bounds, in baselines, the latency a failed or ignored request
// feeds a window: past gradTolerance/0.5 baselines the limit is cut by half
// in a window of them already.
const censorCap = 4

func (s *Shedder) sample(now, latency time.Duration) {
	start := s.winStart.Load()
	if start == notStarted {
		if s.winStart.CompareAndSwap(notStarted, int64(now)) {
			start = int64(now)
		} else {
			start = s.winStart.Load()
		}
	}
	// A sample that ends after the window is over first closes it, then
	// opens the next one.
	if s.winCount.Load() >= gradMinSamples && now-time.Duration(start) >= gradWindow {
		s.endWindow(now)
	}
	s.winCount.Add(1)
	s.winSum.Add(int64(max(latency, 0)))
	// Squared in µs, up to 10 s (10^14 a sample): a window of 90,000 of
	// them would overflow.
	us := int64(min(max(latency, 0), 10*time.Second) / time.Microsecond)
	s.winSq.Add(us * us)
}

func (s *Shedder) endWindow(now time.Duration) {
	if !s.mu.TryLock() {
		return // another Done is ending it
	}
	defer s.mu.Unlock()
	var avg, se time.Duration
	var bound, running bool
	if s.probing.Load() {
		var ok, measured bool
		if avg, se, bound, running, measured, ok = s.cohort.measure(now, s.probeWait()); !ok {
			return
		}
		if !measured {
			// Its cohort measured nothing (quick failures, calls given
			// back): the probe ends as though it had not run.
			s.est.cancel(now)
			s.epoch.Add(1)
			s.probing.Store(false)
			s.winStart.Store(int64(now))
			s.limit.Store(s.est.current())
			s.woken(now)
			return
		}
		s.winStart.Store(int64(now))
	} else {
		start := s.winStart.Load()
		if s.winCount.Load() < gradMinSamples || now-time.Duration(start) < gradWindow {
			return
		}
		s.winStart.Store(int64(now))
		count := s.winCount.Swap(0)
		avg = time.Duration(s.winSum.Swap(0) / count)
		se = stdErr(avg, s.winSq.Swap(0), count)
		bound = 2*s.winBound.Swap(0) >= count // half its samples or more are bounds
		ended := count + s.unsampled.Swap(0)
		if d := now - time.Duration(start); d > 0 {
			s.served.Store(ended * int64(time.Second) / int64(d))
		}
	}
	ahead, _ := s.ahead(0)
	maxIn := s.winMaxIn.Swap(s.inflight.Load() + s.carried() + ahead)
	s.lastAvg.Store(int64(avg))
	old := s.limit.Load()
	next := s.est.update(avg, se, maxIn, now, bound, running)
	s.base.Store(int64(s.est.baseline()))
	if p := s.est.probing(); p || s.probing.Load() {
		// A new epoch: the tickets of later admissions tell them apart,
		// and a probe's cohort is drawn from them.
		e := s.epoch.Add(1)
		if p {
			s.cohort.reset(e, now)
		} else {
			// The window after a probe starts empty.
			s.winCount.Store(0)
			s.winSum.Store(0)
			s.winBound.Store(0)
			s.winSq.Store(0)
			s.unsampled.Store(0)
		}
		s.probing.Store(p)
	}
	s.limit.Store(next)
	if next > old { // for its queue, and those of the Shedders it replaced (see ahead)
		s.woken(now)
	}
}

// stdErr returns the standard error of the average avg of count latencies
// whose squares, in µs², sum to sq.
func stdErr(avg time.Duration, sq, count int64) time.Duration {
	if count < 2 {
		return 0
	}
	m := float64(avg) / float64(time.Microsecond)
	v := (float64(sq)/float64(count) - m*m) * float64(count) / float64(count-1)
	if v <= 0 {
		return 0
	}
	return time.Duration(math.Sqrt(v/float64(count)) * float64(time.Microsecond))
}

// probeCohort is how many requests a probe measures: the first admitted
// once it began. probeCap bounds how long it waits for their ends, or
// censorCap baselines when longer (see probeWait): those still running
// then count at their age, no measure of a fall (see gradient.probed).
const (
	probeCohort = gradMinSamples
	probeCap    = time.Second
)

// cohort is a probe's sample: the first probeCohort requests admitted in
// its epoch, each measured to its end. The first requests to end in a probe
// are the quick ones, and a window of them, when some of a service's
// calls take ten times the others (a dependency's slow answers), measures
// a baseline under the service's and cuts the limit for good; a cohort
// measured to its end holds its slow calls too.
type cohort struct {
	claims atomic.Uint64             // the epoch (low 32 bits) << 32 | the places taken
	start  atomic.Int64              // the probe's start
	ended  atomic.Int64              // the places whose requests ended
	at     [probeCohort]atomic.Int64 // a place's grant instant + 1; 0 until set
	lat    [probeCohort]atomic.Int64 // its latency + 1 once ended; -1 ended measuring nothing; 0 running
	bound  [probeCohort]atomic.Bool  // its latency is a bound (see done)
}

// reset empties c for the probe of epoch e, beginning at now.
func (c *cohort) reset(e uint64, now time.Duration) {
	for i := range probeCohort {
		c.at[i].Store(0)
		c.lat[i].Store(0)
		c.bound[i].Store(false)
	}
	c.ended.Store(0)
	c.start.Store(int64(now))
	c.claims.Store(uint64(uint32(e)) << 32)
}

// claim takes a place in the cohort of epoch e for a request granted its
// slot at granted, if one is left.
func (c *cohort) claim(e uint64, granted time.Duration) (int, bool) {
	for {
		v := c.claims.Load()
		n := uint32(v)
		if uint32(v>>32) != uint32(e) || n >= probeCohort {
			return 0, false
		}
		if c.claims.CompareAndSwap(v, v+1) {
			c.at[n].Store(int64(max(granted, 0)) + 1)
			return int(n), true
		}
	}
}

// holds reports whether place i holds the request of ticket t, granted
// its slot at the instant t keeps: a ticket of a probe 2^epochBits epochs
// before (a stream that ran half an hour) has this one's epoch and place,
// and another instant.
func (c *cohort) holds(i int, t sluice.Ticket) bool {
	const mask = 1<<ticketBits - 1
	at := c.at[i].Load()
	return at > 0 && uint64(at-1)&mask == uint64(t)&mask
}

// end records the end of place i's request: its latency lat, a bound or
// not; a negative lat measures nothing.
func (c *cohort) end(i int, lat time.Duration, bound bool) {
	if i >= probeCohort {
		return
	}
	v := int64(-1)
	if lat >= 0 {
		v = int64(lat) + 1
	}
	c.bound[i].Store(bound)
	if c.lat[i].CompareAndSwap(0, v) {
		c.ended.Add(1)
	}
}

// probeWait is how long a probe waits for its cohort's ends: probeCap, or
// censorCap baselines when longer, so that a service of slow calls is
// measured by their ends, not their ages.
func (s *Shedder) probeWait() time.Duration {
	return max(probeCap, censorCap*time.Duration(s.base.Load()))
}

// over reports whether the probe can be judged at now: its cohort taken
// and ended, or wait gone by with a place taken.
func (c *cohort) over(now, wait time.Duration) bool {
	n := uint32(c.claims.Load())
	return n >= probeCohort && c.ended.Load() >= probeCohort ||
		n > 0 && now-time.Duration(c.start.Load()) >= wait
}

// measure returns, when the probe is over (see over), the average latency
// of its cohort, those still running counted at their age, its standard
// error, whether half of them or more ended at a deadline or with their
// client gone (a request still running is slow, not cut short), and
// whether any was still running; measured is false when none measured
// anything. Fewer than half bounds are left out of the average: a probe
// across a dependency's heal would otherwise take some of its timeouts
// into the baseline.
func (c *cohort) measure(now, wait time.Duration) (avg, se time.Duration, bound, running, measured, ok bool) {
	if !c.over(now, wait) {
		return 0, 0, false, false, false, false
	}
	var lats [probeCohort]int64
	var bounds [probeCohort]bool
	count, nb := 0, 0
	for i := range min(int(uint32(c.claims.Load())), probeCohort) {
		switch v := c.lat[i].Load(); {
		case v > 0:
			lats[count] = v - 1
			bounds[count] = c.bound[i].Load()
			if bounds[count] {
				nb++
			}
			count++
		case v == 0: // still running: at least its age
			if at := c.at[i].Load(); at > 0 {
				lats[count] = max(int64(now)-(at-1), 0)
				count++
				running = true
			}
		}
	}
	if count == 0 {
		return 0, 0, false, false, false, true
	}
	bound = 2*nb >= count
	var sum, sq float64
	n := 0
	for i, l := range lats[:count] {
		if bounds[i] && !bound {
			continue
		}
		us := float64(l) / float64(time.Microsecond)
		sum += float64(l)
		sq += us * us
		n++
	}
	avg = time.Duration(sum / float64(n))
	return avg, stdErr(avg, int64(sq), int64(n)), bound, running, true, true
}

// noteShed records a rejection at now, and reports the change to
// "shedding" when it is one.
func (s *Shedder) noteShed(now time.Duration) {
	for {
		last := s.lastShed.Load()
		if (s.shedding.Load() && time.Duration(last) >= now) || s.lastShed.CompareAndSwap(last, int64(now)) {
			break
		}
	}
	if !s.shedding.Load() {
		s.transition(now, true)
	}
}

// recover returns the Shedder to "normal" when a second has passed since its
// last rejection.
func (s *Shedder) recover(now time.Duration) {
	if s.shedding.Load() && now-time.Duration(s.lastShed.Load()) >= shedCoolOff {
		s.transition(now, false)
	}
}

func (s *Shedder) transition(now time.Duration, shedding bool) {
	s.smu.Lock()
	if s.shedding.Load() == shedding ||
		!shedding && now-time.Duration(s.lastShed.Load()) < shedCoolOff {
		s.smu.Unlock()
		return
	}
	s.shedding.Store(shedding)
	from, to := StateNormal, StateShedding
	if !shedding {
		from, to = to, from
	}
	if len(s.subs) == 0 {
		s.smu.Unlock()
		return
	}
	s.pending = append(s.pending, sluice.StateChange{Policy: s.name, From: from, To: to, At: now})
	s.deliver()
}

// deliver calls the subscribers with the pending changes, in order, outside
// the lock. It is entered with s.smu held and returns with it released. A
// change made while another goroutine delivers is delivered by that one. A
// subscriber that panics keeps no other from hearing every change pending:
// its panic is raised once they have.
func (s *Shedder) deliver() {
	if s.delivering {
		s.smu.Unlock()
		return
	}
	s.delivering = true
	// A listener that panics must not keep the others, or the changes
	// queued behind, from being heard: its panic is raised once they are.
	var first listen.First
	locked := true
	defer func() {
		if !locked { // a listener's runtime.Goexit: let the next change deliver
			s.smu.Lock()
			s.delivering = false
			s.smu.Unlock()
		}
	}()
	for len(s.pending) > 0 {
		c := s.pending[0]
		s.pending = s.pending[1:]
		fns := make([]func(sluice.StateChange), 0, len(s.subs))
		for _, fn := range s.subs {
			fns = append(fns, fn)
		}
		s.smu.Unlock()
		locked = false
		for _, fn := range fns {
			first.Call(fn, c)
		}
		s.smu.Lock()
		locked = true
	}
	s.delivering = false
	s.smu.Unlock()
	first.Raise()
}

// Subscribe registers fn to hear the Shedder's changes between "normal" and
// "shedding", outside its locks and in order; the returned function removes
// it. Changes are noticed on the request path: the return to "normal" is
// reported by the first admission a second or more after the last
// rejection.
func (s *Shedder) Subscribe(fn func(sluice.StateChange)) (unsubscribe func()) {
	if fn == nil {
		return func() {}
	}
	s.smu.Lock()
	id := s.nextSub
	s.nextSub++
	s.subs[id] = fn
	s.smu.Unlock()
	return func() {
		s.smu.Lock()
		delete(s.subs, id)
		s.smu.Unlock()
	}
}

// state returns "normal" or "shedding".
func (s *Shedder) state() string {
	if s.shedding.Load() {
		return StateShedding
	}
	return StateNormal
}

// Stats is a snapshot of a Shedder.
type Stats struct {
	// Limit is the number of requests allowed in flight at once: for a
	// Shedder a reload replaced, no more than its successors'.
	Limit int64
	// Inflight is the number of requests holding a slot: its own, and
	// those of the Shedders a rules reload made in its place or that it
	// took the place of, which count against its limit as its own do.
	Inflight int64
	// Waiting is the number of requests in the queue.
	Waiting int64
	// AvgRT is the average latency of the last sampling window; 0 before
	// the first, and always for a bulkhead (see Needs).
	AvgRT time.Duration
	// Baseline is the latency the learned limit counts as unqueued; 0 for a
	// bulkhead and before the first window.
	Baseline time.Duration
	// Probing is true while the limit is lowered to measure the baseline.
	Probing bool
	// State is "normal" or "shedding". The Shedder reads no clock of its
	// own: it turns back to "normal" at the first request a second after
	// its last rejection, so with no traffic it stays "shedding".
	State string
}

// Stats returns a snapshot of the Shedder.
func (s *Shedder) Stats() Stats {
	ahead, lim := s.ahead(s.limit.Load())
	st := Stats{
		Limit:    lim,
		Inflight: s.inflight.Load() + s.carried() + ahead,
		Waiting:  s.waiting.Load(),
		AvgRT:    time.Duration(s.lastAvg.Load()),
		State:    s.state(),
	}
	if s.est != nil {
		s.mu.Lock()
		st.Baseline, st.Probing = s.est.baseline(), s.est.probing()
		s.mu.Unlock()
	}
	return st
}
