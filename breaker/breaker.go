package breaker

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/listen"
)

// Breaker is a circuit breaker: closed, it lets calls through and counts
// their outcomes in a window; when a trip strategy's condition holds it opens
// and rejects calls at once with sluice.ErrCircuitOpen; after its open
// duration it turns half-open and lets a few probes through, whose outcomes
// close it or open it again.
//
// Every state change starts a new generation; outcomes of calls admitted in
// an earlier generation are dropped, so a slow call that was let through
// before the breaker opened cannot close or reopen it later.
//
// A Breaker is a sluice.Policy and a sluice.StateSource: put it in a Guard's
// chain, even alone (sluice.New(sluice.With(b)), then Do or Execute, as
// gobreaker's Execute). The closed state's paths take no lock. A Breaker is safe for concurrent use; make one with
// New.
type Breaker struct {
	name     string
	cfg      atomic.Pointer[config] // replaced whole by Reconfigure
	env      permitEnv              // the clock
	cur      atomic.Pointer[phase]
	notifier notifier
	sink     *notifier // a Group's queue, fed under mu; nil outside a Group

	// The stall check of the consecutive-failure strategy: the usual
	// latency of a success, smoothed (0 until the first success), and the
	// instant it last took a sample.
	usual    atomic.Int64
	sampleAt atomic.Int64
	// hungWait is the wait the last hung probe ran out (see probeWait); 0
	// once a probe closed the breaker.
	hungWait atomic.Int64

	mu    sync.Mutex    // guards transitions and the fields below
	gen   uint64        // last generation handed out
	trips int           // opens since the breaker last closed, for the backoff
	halfs halfOpenCount // probe outcomes of the current half-open phase
	gone  bool          // dropped from its Group: sink no longer fed, no trip
}

// dispatch delivers the breaker's queued changes to its listeners, then
// to its Group's, and raises a listener's panic once both have heard.
func (b *Breaker) dispatch() {
	var first listen.First
	b.notifier.deliver(&first)
	if b.sink != nil {
		b.sink.deliver(&first)
	}
	first.Raise()
}

type halfOpenCount struct{ succ, fail int64 }

// phase is one generation of the breaker. Only the atomics change after it
// is published.
type phase struct {
	gen       uint64
	state     State
	forced    bool          // ForceOpen or ForceClose: no automatic transition
	openUntil time.Duration // StateOpen
	cw        *countWindow  // the window of the closed phase; kept, read-only, while open
	tw        *timeWindow
	consec    atomic.Uint64 // the run of failures: count (low 32 bits), first epoch (high 32)
	taken     atomic.Int64  // half-open probes admitted and not released
	settled   atomic.Int64  // half-open probes that ended with an outcome
	// lastProbe is when the last half-open probe was admitted.
	lastProbe atomic.Int64
	// The stall check, closed: the ticks in which a call was admitted
	// since a success last ended, and the instant the first call of the
	// stallCalls-th of them was admitted.
	sinceOK  atomic.Int64
	nthSince atomic.Int64
	// lastTick is the last tick in which a call was admitted (noTick
	// before the first).
	lastTick atomic.Int64
	// armed: a success has ended in this closed phase. Until then the stall
	// check waits: a dependency that just came back (the breaker closed on
	// a probe) may answer its first calls slowly, and failures still trip.
	armed atomic.Bool
}

// The stall check: a closed breaker with the consecutive-failure strategy (n
// failures in a row) also trips when calls were admitted in more than n
// ticks, and more than stallCalls, since a success last ended, the first of
// the stallCalls-th of those ticks more than stallFactor usual latencies of
// a success ago, and at least stallFloor: a dependency that stops answering
// is refused before the first of its calls times out. A tick is 2^stallTick
// ns, about a millisecond. Counting the ticks that saw an admission, not the
// calls, costs a busy breaker a write or two a tick, where counting calls
// cost two locked writes a call; up to a call a tick, the two counts are the
// same. The usual latency is the slow end of the successes' latencies: an
// average that a slower success moves by 1/stallUp of the difference and a
// quicker one by 1/stallDown, sampled at most once per stallSample. A spread
// latency, a quiet spell or one slow call trips nothing: a success ends the
// count. The floor keeps a pause of the process (a collection, a descheduled
// thread) from reading as a stall of a dependency that answers in
// microseconds, and a gap of more than the floor between two admissions
// starts the timing again: a pause of the whole machine stops the calls
// coming as well as the answers. A closed phase checks for stalls only once
// a success has ended in it: the first calls after a probe closed the
// breaker meet a dependency that has just come back and may answer them
// slowly, and re-opening on that put the avalanche example's recovery at 3.4
// to 4.0 s instead of 0.2.
const (
	stallFactor = 2
	stallCalls  = 3
	stallUp     = 4
	stallDown   = 64
	stallSample = time.Millisecond
	stallFloor  = 25 * time.Millisecond
	stallTick   = 20
	noTick      = math.MinInt64
)

const genMask = 1<<30 - 1

// tickedBit marks the ticket of a call that counted its tick for the stall
// check: a Released or Ignored end takes the tick back.
const tickedBit sluice.Ticket = 1 << 31

// ticket returns the ticket of a call admitted in p: the generation in bits
// 1..30, and bit 0 set for a half-open probe. Tickets fit in 32 bits so a
// Group can add its own.
func (p *phase) ticket(probe bool) sluice.Ticket {
	t := sluice.Ticket(p.gen&genMask) << 1
	if probe {
		t |= 1
	}
	return t
}

// newPhase returns a phase of generation gen in state to.
func newPhase(gen uint64, to State, forced bool) *phase {
	p := &phase{gen: gen, state: to, forced: forced}
	p.lastTick.Store(noTick)
	return p
}

func (p *phase) owns(t sluice.Ticket) bool { return uint64(t>>1)&genMask == p.gen&genMask }

// New returns a closed Breaker named "breaker/" + name.
//
// Without options it trips at 5 consecutive failures, counts on a window of
// the last 100 calls, stays open 1s, and closes after one successful probe.
func New(name string, opts ...Option) (*Breaker, error) {
	if name == "" {
		return nil, errors.New("breaker: New: empty name")
	}
	cfg, err := buildConfig(forBreaker, opts)
	if err != nil {
		return nil, err
	}
	return newBreaker("breaker/"+name, cfg, 0), nil
}

func newBreaker(name string, cfg *config, genBase uint64) *Breaker {
	b := &Breaker{name: name, gen: genBase}
	b.cfg.Store(cfg)
	b.env = newPermitEnv(cfg.clock)
	p := newPhase(genBase, StateClosed, false)
	b.newWindow(p)
	b.cur.Store(p)
	return b
}

func (b *Breaker) newWindow(p *phase) {
	if c := b.cfg.Load(); c.count > 0 {
		p.cw = newCountWindow(c.count)
	} else {
		p.tw = newTimeWindow(c.length, c.buckets, false)
	}
}

// Needs returns 0 when the breaker's Done needs no end instant nor latency
// for a Success, a Failure or an Ignored call: when it counts outcomes in a
// count window, has no slow-call strategy and reads SystemClock. It then
// reads the clock itself when such an outcome trips it or is a half-open
// probe's, and, for the stall check, at most once a millisecond when a
// success ends. It returns sluice.NeedsEnd otherwise.
func (b *Breaker) Needs() sluice.Needs {
	return needs(b.cfg.Load(), b.env.system)
}

// Name returns "breaker/" followed by the name given to New.
func (b *Breaker) Name() string { return b.name }

// State returns the breaker's state. An open breaker whose open duration is
// over reports StateOpen until a call arrives and turns it half-open.
func (b *Breaker) State() State { return b.cur.Load().state }

// Counts returns a snapshot of the breaker's counters. While the breaker is
// open or half-open, the window is the one that tripped it.
func (b *Breaker) Counts() Counts {
	p := b.cur.Load()
	var t tally
	run := p.consec.Load()
	if p.cw != nil {
		t = p.cw.read()
	} else {
		now := b.env.now()
		if p.state == StateClosed {
			t = p.tw.readAt(now)
			if runLeft(p, run, p.tw.epoch(now)) {
				// Its first failure left the window: the run is what
				// failRun would count again, the window's failures.
				run = uint64(min(max(t.lo, 0), math.MaxUint32))
			}
		} else {
			t = p.tw.read()
		}
	}
	c := Counts{
		Requests:            max(t.total, 0),
		Failures:            max(t.lo, 0),
		SlowCalls:           max(t.hi, 0),
		ConsecutiveFailures: int64(uint32(run)),
		Forced:              p.forced,
	}
	c.Successes = max(c.Requests-c.Failures, 0)
	if p.tw != nil {
		c.ConsecutiveFailures = min(c.ConsecutiveFailures, c.Failures) // see failRun
	}
	if p.state == StateOpen && !p.forced {
		c.NextProbe = max(p.openUntil-b.env.now(), 0)
	}
	if p.state == StateHalfOpen {
		c.ProbesAdmitted = p.taken.Load()
		b.mu.Lock()
		if b.cur.Load() == p {
			c.ProbeSuccesses, c.ProbeFailures = b.halfs.succ, b.halfs.fail
		}
		b.mu.Unlock()
	}
	return c
}

// Admit decides on a call at the monotonic instant now: a closed breaker
// admits it, an open one rejects it with sluice.ErrCircuitOpen and a
// RetryAfter until its half-open probes, and a half-open one admits it as a
// probe while probes remain, then rejects with the base open duration as
// RetryAfter, the wait after which its probes have decided. It is the
// sluice.Policy method, which a Guard calls.
func (b *Breaker) Admit(_ context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	p := b.cur.Load()
	if p.state == StateClosed {
		t := p.ticket(false)
		if n := b.cfg.Load().consecutive; n > 0 {
			if tick := int64(now) >> stallTick; p.lastTick.Load() != tick {
				// The first call of its tick, unless another just took it.
				if last := p.lastTick.Swap(tick); last != tick {
					t |= tickedBit
					if b.tickAdmitted(p, n, tick, last, now) {
						b.trip(p, now)
						return b.Admit(context.Background(), now)
					}
				}
			}
		}
		return t, sluice.Quota{Limit: -1}, nil
	}
	if p.state == StateOpen && !p.forced && now < p.openUntil {
		return 0, sluice.Quota{Limit: -1, RetryAfter: p.openUntil - now}, sluice.ErrCircuitOpen
	}
	return b.admitSlow(p, now)
}

var _ sluice.Policy = (*Breaker)(nil)

func (b *Breaker) admitSlow(p *phase, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	for {
		switch p.state {
		case StateClosed:
			return p.ticket(false), sluice.Quota{Limit: -1}, nil
		case StateOpen:
			if p.forced {
				return b.reject(b.cfg.Load().openBase)
			}
			if now < p.openUntil {
				return b.reject(p.openUntil - now)
			}
			b.mu.Lock()
			if b.cur.Load() == p {
				b.setPhase(p, StateHalfOpen, now, 0, false)
			}
			b.mu.Unlock()
			b.dispatch()
		case StateHalfOpen:
			for {
				n := p.taken.Load()
				if n >= b.cfg.Load().probes {
					if b.hung(p, now) {
						b.probesHung(p, now)
						break
					}
					return b.reject(b.cfg.Load().openBase)
				}
				// Noted first: a call that finds the probes taken must not
				// time this one from an earlier probe's admission.
				p.lastProbe.Store(int64(now))
				if p.taken.CompareAndSwap(n, n+1) {
					return p.ticket(true), sluice.Quota{Limit: -1}, nil
				}
			}
		}
		p = b.cur.Load()
	}
}

// tickAdmitted counts tick, the tick of now, in which a call was just
// admitted in p, for the stall check; last is the tick of the admission
// before. It reports whether p stalled: p is to trip.
func (b *Breaker) tickAdmitted(p *phase, n int64, tick, last int64, now time.Duration) bool {
	k := p.sinceOK.Add(1)
	switch {
	case k == stallCalls:
		p.nthSince.Store(int64(now))
	case k < stallCalls:
	case last != noTick && tick-last > int64(stallFloor)>>stallTick:
		// No call came for longer than the floor: the process paused (the
		// machine's host took its processors) or the traffic did. A stall
		// is read only across calls that kept coming: it is timed again
		// from here.
		p.nthSince.Store(int64(now))
	default:
		return k > max(n, stallCalls) && p.armed.Load() && b.stalled(p, now) && !p.forced
	}
	return false
}

// stalled reports whether the first call of the stallCalls-th tick that
// saw an admission in p since a success last ended was admitted more than
// stallFactor usual latencies, and more than stallFloor, before now.
func (b *Breaker) stalled(p *phase, now time.Duration) bool {
	u := b.usual.Load()
	return u > 0 && int64(now)-p.nthSince.Load() > max(stallFactor*u, int64(stallFloor))
}

// trip opens the closed phase p at now, unless it has ended.
func (b *Breaker) trip(p *phase, now time.Duration) {
	draw := b.jitterDraw()
	b.mu.Lock()
	// A breaker dropped from its Group ignores what still reaches it: the
	// Group keeps every open breaker, and could not keep this one.
	if b.cur.Load() == p && !b.gone {
		b.trips++
		b.setPhase(p, StateOpen, now, b.openDuration(draw), false)
	}
	b.mu.Unlock()
	b.dispatch()
}

// untick takes back the tick that an Ignored or Released call counted. The
// tick is given back whole: the other calls of the tick were not counted,
// and are not now. A chain that releases many calls (a limiter behind the
// breaker) may so delay the stall check; it never hastens it.
func (b *Breaker) untick(p *phase) {
	for {
		k := p.sinceOK.Load()
		if k <= 0 || p.sinceOK.CompareAndSwap(k, k-1) {
			return
		}
	}
}

// sampleEnd takes the latency of a success that ended at now into the
// usual latency, at most once per stallSample. With latency -1, now is the
// call's admission, and the breaker's clock is read for its end: about
// once a millisecond, rather than by the Guard for every call.
func (b *Breaker) sampleEnd(now, latency time.Duration) {
	if latency < 0 {
		end := b.env.now()
		now, latency = end, max(end-now, 0)
	}
	last := b.sampleAt.Load()
	if int64(now)-last < int64(stallSample) || !b.sampleAt.CompareAndSwap(last, int64(now)) {
		return
	}
	u, l := b.usual.Load(), int64(latency)
	switch {
	case u == 0:
		u = l
	case l > u:
		u += (l - u) / stallUp
	default:
		u -= (u - l) / stallDown
	}
	b.usual.Store(max(u, 1))
}

func (b *Breaker) reject(retryAfter time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1, RetryAfter: max(retryAfter, 1)}, sluice.ErrCircuitOpen
}

// Done reports how a call admitted with ticket t ended, at instant now after
// latency. Success and Failure are counted; Ignored and Released are not,
// and give a half-open probe's slot back for another probe. Outcomes of calls
// admitted before the last state change are dropped. It is the sluice.Policy
// method, which a Guard calls.
func (b *Breaker) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	p := b.cur.Load()
	if !p.owns(t) {
		return
	}
	switch {
	case p.state == StateClosed:
		c := b.cfg.Load()
		if o != sluice.Success {
			if c.consecutive > 0 && o != sluice.Failure && t&tickedBit != 0 {
				b.untick(p) // Ignored, Released: as if never admitted
			}
			b.doneClosed(p, o, now, latency)
			return
		}
		if c.consecutive > 0 {
			// The stall check: a success ends the count of ticks since the
			// last one. Told latency -1 (a Guard of untimed policies), now
			// is the call's admission, and the first call of each tick is
			// sampled, chosen when it was admitted: the first call to end
			// after an instant would be the quickest, and the usual latency
			// would drift down.
			if p.sinceOK.Load() != 0 {
				p.sinceOK.Store(0)
			}
			if !p.armed.Load() {
				p.armed.Store(true)
			}
			if latency < 0 {
				if t&tickedBit != 0 {
					b.sampleEnd(now, latency)
				}
			} else if int64(now)-b.sampleAt.Load() >= int64(stallSample) {
				b.sampleEnd(now, latency)
			}
		}
		if slow := c.slowThreshold; p.cw != nil && (slow <= 0 || latency <= slow) &&
			p.consec.Load() == 0 && p.cw.steady() {
			// The common case, told without doneClosed's calls: a success
			// ends no run of failures and leaves a count window full of
			// plain successes as it is.
			return
		}
		b.doneClosed(p, o, now, latency)
	case p.state == StateHalfOpen && t&1 != 0:
		b.doneProbe(p, o, now, latency)
	}
}

func (b *Breaker) doneClosed(p *phase, o sluice.Outcome, now, latency time.Duration) {
	var code uint32
	switch o {
	case sluice.Success:
		code = codePresent
	case sluice.Failure:
		code = codePresent | codeFailure
	default:
		return
	}
	if slow := b.cfg.Load().slowThreshold; slow > 0 && latency > slow {
		code |= codeSlow
	}
	var run int64
	var t tally
	if p.cw != nil {
		if o == sluice.Failure {
			run = b.failRun(p, 0)
		} else if p.consec.Load() != 0 {
			p.consec.Store(0)
		}
		if !p.cw.record(code) && run == 0 {
			return
		}
		t = p.cw.read()
	} else {
		e := p.tw.epoch(now)
		var f, s int64
		if code&codeFailure != 0 {
			f = 1
		}
		if code&codeSlow != 0 {
			s = 1
		}
		p.tw.add(e, 1, f, s) // first: a run's recount (failRun) counts this failure
		if o == sluice.Failure {
			run = b.failRun(p, e)
		} else if p.consec.Load() != 0 {
			p.consec.Store(0)
		}
		if f == 0 && s == 0 && run == 0 && !p.tw.failing() {
			return // nothing in the window can trip the breaker
		}
		t = p.tw.read()
	}
	if p.forced || !b.tripped(t, run) {
		return
	}
	b.trip(p, b.at(now, latency))
}

// at returns now, or the breaker's clock when latency is -1: a Guard of
// policies that need no end instant leaves it unread, and the open period must still
// start when the call ended.
func (b *Breaker) at(now, latency time.Duration) time.Duration {
	if latency < 0 {
		return b.env.now()
	}
	return now
}

// runLeft reports whether run, a value of p.consec, is a run whose first
// failure has left p's rolling window at epoch e. Epochs are kept modulo
// 2³², so the difference is read within ±2³¹: a late failure from before
// the run began (behind it by less than a window) joins it, and any other
// difference means the run's start is gone, however long ago (a gap of 2³¹
// buckets or more reads negative). Only a gap within a window of a multiple
// of 2³² buckets (50 days of 1 ms buckets) is taken for a recent one.
func runLeft(p *phase, run uint64, e int64) bool {
	if p.tw == nil || uint32(run) == 0 {
		return false
	}
	d := int64(int32(uint32(e) - uint32(run>>32)))
	return d >= p.tw.n || d < -p.tw.n
}

// failRun adds a failure at epoch e to p's run of failures and returns the
// run's length. On a rolling window, a run whose first failure has left the
// window counts again from the window's oldest bucket: it began before the
// window, and a success would have ended it, so every failure in the
// window, this one included (added first), is of the run.
func (b *Breaker) failRun(p *phase, e int64) int64 {
	for {
		v := p.consec.Load()
		n := uint32(v)
		var nv uint64
		switch {
		case n == 0:
			nv = uint64(uint32(e))<<32 | 1
		case runLeft(p, v, e):
			in := min(max(p.tw.read().lo, 1), math.MaxUint32)
			nv = uint64(uint32(e-p.tw.n+1))<<32 | uint64(in)
		case n == math.MaxUint32:
			return int64(n)
		default:
			nv = v + 1
		}
		if p.consec.CompareAndSwap(v, nv) {
			run := int64(uint32(nv))
			if p.tw != nil {
				// Failures ending at once each add to the window before
				// their run: a recount may see them all, and each adds
				// one after. The run is never longer than the window's
				// failures.
				run = min(run, p.tw.read().lo)
			}
			return run
		}
	}
}

// tripped reports whether a trip strategy's condition holds.
func (b *Breaker) tripped(t tally, run int64) bool {
	c := b.cfg.Load()
	if c.consecutive > 0 && run >= c.consecutive {
		return true
	}
	if t.lo <= 0 && t.hi <= 0 {
		return false
	}
	switch {
	case c.errRatio > 0 && t.total >= c.errRatioMin && t.lo*ppm >= c.errRatio*t.total:
		return true
	case c.errCount > 0 && t.total >= c.errCountMin && t.lo >= c.errCount:
		return true
	case c.slowRatio > 0 && t.total >= c.slowMin && t.hi*ppm >= c.slowRatio*t.total:
		return true
	}
	return false
}

func (b *Breaker) doneProbe(p *phase, o sluice.Outcome, now, latency time.Duration) {
	if o == sluice.Released || o == sluice.Ignored {
		p.taken.Add(-1)
		return
	}
	p.settled.Add(1)
	cfg := b.cfg.Load()
	ok := o == sluice.Success && (cfg.slowThreshold == 0 || latency <= cfg.slowThreshold)
	var draw float64
	if !ok {
		draw = b.jitterDraw()
	}
	now = b.at(now, latency)
	b.mu.Lock()
	if b.cur.Load() == p {
		if ok {
			b.halfs.succ++
		} else {
			b.halfs.fail++
		}
		// Under mu: Reconfigure cannot change the numbers meanwhile.
		b.settleProbes(p, b.cfg.Load(), now, draw)
	}
	b.mu.Unlock()
	b.dispatch()
}

// probeWait is how long half-open probes may run: the open duration, or
// stallFactor usual latencies of a success when longer; without a usual
// latency (one learnt by the consecutive-failure strategy), the slow-call
// threshold, else unknownProbeWait. A probe that has not ended by then (a
// call that hangs, as the calls that opened the breaker may have) counts as
// failed, so that one hung call does not hold the breaker half-open,
// rejecting everything, for as long as it hangs.
func (b *Breaker) probeWait() time.Duration {
	c := b.cfg.Load()
	var w time.Duration
	switch u := b.usual.Load(); {
	case u > 0:
		w = max(c.openBase, time.Duration(stallFactor*u), c.slowThreshold)
	case c.slowThreshold > 0:
		w = max(c.openBase, c.slowThreshold)
	default:
		w = max(c.openBase, unknownProbeWait)
	}
	if h := time.Duration(b.hungWait.Load()); h > 0 {
		// After a probe counted hung, twice its wait, up to a bound: a
		// dependency that came back slower for good is not taken for hung
		// at every probe, and one that hangs still gets a probe that often.
		w = max(w, min(2*h, max(unknownProbeWait, c.openMax, c.slowThreshold)))
	}
	return w
}

// unknownProbeWait is how long a probe may run when the breaker knows no
// latency of the dependency's.
const unknownProbeWait = 10 * time.Second

// hung reports whether the probes of p, half-open and all taken, include
// one that has not ended, the last of them admitted more than probeWait
// before now.
func (b *Breaker) hung(p *phase, now time.Duration) bool {
	return !p.forced && p.settled.Load() < p.taken.Load() && int64(now)-p.lastProbe.Load() > int64(b.probeWait())
}

// probesHung counts the probes of p, half-open, that have not ended by now
// as failed, which opens it again. Their ends, when they come, are of a
// phase gone and count for nothing.
func (b *Breaker) probesHung(p *phase, now time.Duration) {
	draw := b.jitterDraw()
	b.mu.Lock()
	if b.cur.Load() == p {
		// Under mu, for p still in force: a Reset meanwhile forgets it.
		b.hungWait.Store(int64(b.probeWait())) // the next probes wait longer
		b.halfs.fail += max(p.taken.Load()-p.settled.Load(), 0)
		b.settleProbes(p, b.cfg.Load(), now, draw)
	}
	b.mu.Unlock()
	b.dispatch()
}

// settleProbes closes p, half-open, at now when the probes counted meet
// c's need of successes, and opens it when its failures leave too few
// probes to meet it, for its open duration shortened by the jitter's share
// draw. Called with b.mu held.
func (b *Breaker) settleProbes(p *phase, c *config, now time.Duration, draw float64) {
	switch {
	case b.halfs.succ >= c.need:
		b.trips = 0
		b.hungWait.Store(0)
		b.setPhase(p, StateClosed, now, 0, false)
	case b.halfs.fail > c.probes-c.need:
		b.trips++
		b.setPhase(p, StateOpen, now, b.openDuration(draw), false)
	}
}

// openDuration returns how long the breaker stays open after its b.trips-th
// opening in a row, shortened by the jitter's share draw. Called with b.mu
// held.
func (b *Breaker) openDuration(draw float64) time.Duration {
	c := b.cfg.Load()
	d := c.openBase
	for i := 1; i < b.trips && d < c.openMax; i++ {
		if d > c.openMax/2 {
			d = c.openMax // doubled, it would pass the cap (or overflow)
			break
		}
		d *= 2
	}
	d = min(d, c.openMax)
	d -= time.Duration(float64(d) * c.jitter * draw)
	return max(d, 1)
}

// jitterDraw draws the random number of the next open duration's jitter,
// before the lock is taken: the user's random source never runs under it.
func (b *Breaker) jitterDraw() float64 { return jitterDraw(b.cfg.Load()) }

// jitterDraw draws the jitter's share of an open duration under c.
func jitterDraw(c *config) float64 {
	if c.jitter == 0 {
		return 0
	}
	r := c.random()
	if !(r > 0) { // NaN too: a source out of its contract jitters nothing
		return 0
	}
	return min(r, 1)
}

// setPhase starts a new generation in state to, replacing old, and queues
// the state change for the listeners. Called with b.mu held.
func (b *Breaker) setPhase(old *phase, to State, now, openFor time.Duration, forced bool) {
	b.gen++
	np := newPhase(b.gen, to, forced)
	switch to {
	case StateClosed:
		b.newWindow(np)
	case StateOpen:
		np.openUntil = now + openFor
		if np.openUntil < now {
			np.openUntil = math.MaxInt64
		}
		fallthrough
	default:
		np.cw, np.tw = old.cw, old.tw
		np.consec.Store(old.consec.Load())
	}
	b.halfs = halfOpenCount{}
	b.cur.Store(np)
	if old.state != to {
		c := sluice.StateChange{Policy: b.name, From: old.state.String(), To: to.String(), At: now}
		b.notifier.queue(c)
		if b.sink != nil && !b.gone {
			b.sink.queue(c)
		}
	}
}

var (
	_ sluice.Policy      = (*Breaker)(nil)
	_ sluice.StateSource = (*Breaker)(nil)
	_ sluice.Opener      = (*Breaker)(nil)
)
