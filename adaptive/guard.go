package adaptive

import (
	"context"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// The states a Guard reports to its subscribers.
const (
	// StateNormal: the Guard has shed nothing for a cool-off.
	StateNormal = "normal"
	// StateShedding: the Guard shed a request less than a cool-off ago.
	StateShedding = "shedding"
)

var (
	_ sluice.Policy      = (*Guard)(nil)
	_ sluice.StateSource = (*Guard)(nil)
	_ io.Closer          = (*Guard)(nil)
	_ sluice.Policy      = (*ConcurrencyLimit)(nil)
)

// Guard is a system-load guard in the BBR style, a sluice.Policy.
//
// Over a rolling window of buckets (default 10 s in 100 buckets) it tracks
// the most requests that ended in one bucket (maxPass) and the lowest
// per-bucket average latency (minRT). Their product, maxPass × minRT / bucket
// duration, is the number of requests the service carries in flight when it
// runs at its best observed throughput without queueing. While CPU usage is
// above the threshold (default 0.8), the Guard sheds a request when more
// requests than that are already in flight; after a shed it stays cautious
// for a cool-off (default 1 s), checking inflight even if CPU usage dips.
// The CPU is read by a Sampler's goroutine, never on the request path.
//
// System rules in the manner of Sentinel's adaptive system protection can be
// added, each independent of the CPU: WithMaxInflight, WithMaxAvgRT,
// WithMaxQPS and WithMaxLoad1. Requests marked sluice.PriorityCritical are
// shed only at higher thresholds (WithCritical).
//
// Rejections carry Cause ErrCPUOverload, ErrLoadOverload, ErrMaxInflight,
// ErrMaxAvgRT or ErrMaxQPS, all wrapping sluice.ErrOverloaded, with Limit -1
// and a RetryAfter. Requests ending Success or Failure feed the window;
// Ignored and Released ones only leave the inflight count.
//
// A Guard implements sluice.StateSource ("normal" and "shedding") and
// io.Closer: Close releases its share of the process-wide sampler.
type Guard struct {
	name         string
	sampler      Sampler
	owned        *SystemSampler // started by this Guard, stopped by Close
	closed       atomic.Bool
	cpuThreshold float64
	criticalCPU  float64
	critFactor   float64
	coolOff      time.Duration
	maxInflight  int64
	maxAvgRT     time.Duration
	qpsCap       int64 // admissions allowed per perSec buckets
	maxLoad1     float64
	rules        bool

	w *window

	_        [64]byte // inflight is written by every request: a line of its own
	inflight atomic.Int64
	_        [56]byte
	shedding atomic.Bool
	lastShed atomic.Int64
	// lastCPUShed is the instant of the last shed for CPU (noCPUShed before
	// the first): only those start the cool-off during which CPU below the
	// threshold still sheds.
	lastCPUShed atomic.Int64

	mu         sync.Mutex
	subs       map[uint64]func(sluice.StateChange)
	nextSub    uint64
	pending    []sluice.StateChange
	delivering bool
}

// NewGuard returns a Guard. Without WithSampler it shares the process-wide
// SystemSampler, starting it if this is its first user; it returns an error
// when the machine has no CPU usage source it can read.
func NewGuard(opts ...Option) (*Guard, error) {
	o, err := buildOptions(kindGuard, "adaptive/bbr", opts)
	if err != nil {
		return nil, err
	}
	if !o.thresholdSet {
		o.cpuThreshold = 0.8
	}
	if !o.criticalSet {
		o.criticalCPU, o.criticalFactor = 0.95, 1.5
	}
	o.criticalCPU = max(o.criticalCPU, o.cpuThreshold)
	if o.window == 0 {
		o.window, o.buckets = 10*time.Second, 100
	}
	coolOff := time.Second
	if o.coolOffSet {
		coolOff = o.coolOff
	}
	g := &Guard{
		name:         o.name,
		cpuThreshold: o.cpuThreshold,
		criticalCPU:  o.criticalCPU,
		critFactor:   o.criticalFactor,
		coolOff:      coolOff,
		maxInflight:  o.maxInflight,
		maxAvgRT:     o.maxAvgRT,
		maxLoad1:     o.maxLoad1,
		w:            newWindow(o.window, o.buckets),
		subs:         map[uint64]func(sluice.StateChange){},
	}
	if o.maxQPS > 0 {
		span := float64(g.w.perSec) * float64(g.w.dur) / float64(time.Second)
		// A rate too high to count in an int64 is no cap at all.
		g.qpsCap = math.MaxInt64
		if c := math.Floor(o.maxQPS * span); c < math.MaxInt64 {
			g.qpsCap = max(int64(c), 1)
		}
	}
	g.rules = g.maxInflight > 0 || g.maxAvgRT > 0 || g.qpsCap > 0 || g.maxLoad1 > 0
	g.lastCPUShed.Store(noCPUShed)
	g.sampler = o.sampler
	if g.sampler == nil {
		s, err := sharedSampler()
		if err != nil {
			return nil, err
		}
		g.sampler = s
	}
	if s, ok := g.sampler.(*SystemSampler); ok {
		s.Start()
		g.owned = s
	}
	return g, nil
}

// Name returns the Guard's name; default "adaptive/bbr".
func (g *Guard) Name() string { return g.name }

// Admit decides on one request at the monotonic instant now. It costs a few
// atomic loads; the context is read only when a rule would shed the request,
// to see whether it is critical.
func (g *Guard) Admit(ctx context.Context, now time.Duration) sluice.Verdict {
	var d sluice.Decision
	t, ok := g.admit(ctx, now, &d)
	if !ok {
		return sluice.Verdict{Limit: -1, RetryAfter: d.RetryAfter, Cause: d.Cause}
	}
	return sluice.Verdict{Ticket: t, Limit: -1}
}

// Needs returns sluice.NeedsEnd: the guard learns from each call's latency.
func (g *Guard) Needs() sluice.Needs { return sluice.NeedsEnd }

// admit decides on a request at now: it returns the ticket and true when
// the request may go, and otherwise writes the shed's Decision to *d.
func (g *Guard) admit(ctx context.Context, now time.Duration, d *sluice.Decision) (sluice.Ticket, bool) {
	idx := g.w.index(now)
	g.w.advance(idx)
	if g.shedding.Load() && now-time.Duration(g.lastShed.Load()) >= g.coolOff {
		g.recover(now)
	}
	// The sampler is read before the request counts as in flight: a
	// sampler that panics leaves no count behind.
	look := g.rules || g.shedding.Load() || g.sampler.CPU() > g.cpuThreshold
	// The request counts as in flight before the rules look, so requests
	// arriving together see each other and a maximum is never overshot.
	inflight := g.inflight.Add(1) - 1
	if look {
		if g.checked(ctx, now, idx, inflight, d) {
			return 0, false
		}
	}
	if g.qpsCap > 0 {
		g.w.admit(idx)
	}
	return sluice.Ticket(idx), true
}

// checked runs check. A shed request leaves the inflight count, and so does
// one whose shed panicked in a state listener (the panic goes on to the
// caller, who has no ticket to give back).
func (g *Guard) checked(ctx context.Context, now time.Duration, idx, inflight int64, d *sluice.Decision) (shed bool) {
	returned := false
	defer func() {
		if shed || !returned {
			g.inflight.Add(-1)
		}
	}()
	shed = g.check(ctx, now, idx, inflight, d)
	returned = true
	return shed
}

// check applies the rules to a request at now, with inflight others in
// flight; when the request is shed it writes the Decision to *d and reports
// true.
func (g *Guard) check(ctx context.Context, now time.Duration, idx, inflight int64, d *sluice.Decision) bool {
	crit := -1 // unknown until a rule would shed
	critical := func() bool {
		if crit < 0 {
			crit = 0
			if sluice.PriorityFrom(ctx) == sluice.PriorityCritical {
				crit = 1
			}
		}
		return crit == 1
	}
	over := func(v, limit float64) bool { // v is over limit for this request
		return v > limit && (!critical() || v > limit*g.critFactor)
	}
	if g.maxInflight > 0 && over(float64(inflight)+1, float64(g.maxInflight)) {
		*d = g.shed(now, ErrMaxInflight, g.w.dur)
		return true
	}
	if g.qpsCap > 0 {
		if over(float64(g.w.lastSecond(idx))+1, float64(g.qpsCap)) {
			next := time.Duration(idx+1)*g.w.dur - now
			*d = g.shed(now, ErrMaxQPS, max(next, 1))
			return true
		}
	}
	wait := max(g.coolOff, g.w.dur)
	if g.maxAvgRT > 0 && over(float64(g.w.avgRT.Load()), float64(g.maxAvgRT)) {
		*d = g.shed(now, ErrMaxAvgRT, wait)
		return true
	}
	est := g.w.estimate.Load()
	if inflight <= est {
		return false
	}
	if g.maxLoad1 > 0 && over(g.sampler.Load1(), g.maxLoad1) {
		*d = g.shed(now, ErrLoadOverload, wait)
		return true
	}
	if cpu := g.sampler.CPU(); cpu > g.cpuThreshold || g.coolingOff(now) {
		if !critical() || cpu > g.criticalCPU {
			g.noteCPUShed(now)
			*d = g.shed(now, ErrCPUOverload, wait)
			return true
		}
	}
	return false
}

// noCPUShed marks a Guard that has not shed for CPU yet.
const noCPUShed = math.MinInt64

// coolingOff reports whether now lies within the cool-off after the last
// shed for CPU.
func (g *Guard) coolingOff(now time.Duration) bool {
	last := g.lastCPUShed.Load()
	return last != noCPUShed && now-time.Duration(last) < g.coolOff
}

// noteCPUShed moves the instant of the last shed for CPU to now, never back.
func (g *Guard) noteCPUShed(now time.Duration) {
	for {
		last := g.lastCPUShed.Load()
		if last != noCPUShed && time.Duration(last) >= now || g.lastCPUShed.CompareAndSwap(last, int64(now)) {
			return
		}
	}
}

// shed records a shed at now and returns its Decision.
func (g *Guard) shed(now time.Duration, cause error, retryAfter time.Duration) sluice.Decision {
	for {
		last := g.lastShed.Load()
		if (g.shedding.Load() && time.Duration(last) >= now) || g.lastShed.CompareAndSwap(last, int64(now)) {
			break
		}
	}
	if !g.shedding.Load() {
		g.transition(now, true)
	}
	return sluice.Decision{Policy: g.name, Limit: -1, RetryAfter: retryAfter, Cause: cause}
}

// recover returns the Guard to normal when a cool-off has passed since its
// last shed.
func (g *Guard) recover(now time.Duration) {
	g.transition(now, false)
}

func (g *Guard) transition(now time.Duration, shedding bool) {
	g.mu.Lock()
	if g.shedding.Load() == shedding {
		g.mu.Unlock()
		return
	}
	if !shedding && now-time.Duration(g.lastShed.Load()) < g.coolOff {
		g.mu.Unlock()
		return
	}
	g.shedding.Store(shedding)
	from, to := StateNormal, StateShedding
	if !shedding {
		from, to = to, from
	}
	if len(g.subs) == 0 {
		g.mu.Unlock()
		return
	}
	g.pending = append(g.pending, sluice.StateChange{Policy: g.name, From: from, To: to, At: now})
	g.deliver()
}

// deliver calls the subscribers with the pending changes, in order, outside
// the lock. It is entered with g.mu held and returns with it released. A
// change made while another goroutine delivers is delivered by that one. A
// subscriber that panics stops this delivery, not later ones: the changes
// still pending go out with the next.
func (g *Guard) deliver() {
	if g.delivering {
		g.mu.Unlock()
		return
	}
	g.delivering = true
	locked := true
	defer func() {
		if !locked {
			g.mu.Lock()
		}
		g.delivering = false
		g.mu.Unlock()
	}()
	for len(g.pending) > 0 {
		c := g.pending[0]
		g.pending = g.pending[1:]
		fns := make([]func(sluice.StateChange), 0, len(g.subs))
		for _, fn := range g.subs {
			fns = append(fns, fn)
		}
		g.mu.Unlock()
		locked = false
		for _, fn := range fns {
			fn(c)
		}
		g.mu.Lock()
		locked = true
	}
}

// Done reports how an admitted request ended: Success and Failure feed the
// window with the latency; every outcome leaves the inflight count, and
// Released also takes back the admission from the inbound rate.
func (g *Guard) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	g.inflight.Add(-1)
	switch o {
	case sluice.Success, sluice.Failure:
		g.w.record(now, latency)
	case sluice.Released:
		if g.qpsCap > 0 {
			g.w.unadmit(int64(t))
		}
	}
}

// Subscribe registers fn to hear the Guard's changes between "normal" and
// "shedding", outside its locks and in order; the returned function removes
// it. Changes are noticed on the request path: the return to "normal" is
// reported by the first request after the cool-off.
func (g *Guard) Subscribe(fn func(sluice.StateChange)) (unsubscribe func()) {
	if fn == nil {
		return func() {}
	}
	g.mu.Lock()
	id := g.nextSub
	g.nextSub++
	g.subs[id] = fn
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.subs, id)
		g.mu.Unlock()
	}
}

// State returns "normal" or "shedding".
func (g *Guard) State() string {
	if g.shedding.Load() {
		return StateShedding
	}
	return StateNormal
}

// Stats is a snapshot of a Guard's measurements.
type Stats struct {
	// CPU is the sampler's CPU usage, a fraction.
	CPU float64
	// Load1 is the sampler's one-minute load average.
	Load1 float64
	// Inflight is the number of requests admitted and not yet done.
	Inflight int64
	// MaxPass is the most requests that ended in one completed bucket of the
	// window; 0 while none has.
	MaxPass int64
	// MinRT is the lowest average latency of a completed bucket; 0 while
	// unknown.
	MinRT time.Duration
	// MaxInflight is MaxPass × MinRT / bucket duration, the inflight above
	// which the Guard sheds under load; -1 while unknown.
	MaxInflight int64
	// AvgRT is the average latency of the requests that ended in the last
	// second of completed buckets; 0 when none did.
	AvgRT time.Duration
	// State is "normal" or "shedding".
	State string
}

// Stats returns a snapshot of the Guard's measurements as of the last
// bucket that completed.
func (g *Guard) Stats() Stats {
	est := g.w.estimate.Load()
	if est == math.MaxInt64 {
		est = -1
	}
	return Stats{
		CPU:         g.sampler.CPU(),
		Load1:       g.sampler.Load1(),
		Inflight:    g.inflight.Load(),
		MaxPass:     g.w.maxPass.Load(),
		MinRT:       time.Duration(g.w.minRT.Load()),
		MaxInflight: est,
		AvgRT:       time.Duration(g.w.avgRT.Load()),
		State:       g.State(),
	}
}

// Close releases the Guard's share of its SystemSampler: the sampler's
// goroutine stops when its last Guard is closed. Closing twice is harmless.
func (g *Guard) Close() error {
	if g.owned != nil && g.closed.CompareAndSwap(false, true) {
		g.owned.Stop()
	}
	return nil
}
