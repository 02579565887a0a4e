package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// The tests of this file drive each limiter with random sequences of
// operations at explicit instants (forward in random steps, now and then
// backwards) and check the promises of its doc comment after them: what it
// admits over any interval, and the fields of every Decision. Each run is
// seeded; a failure names its seed and the last operations.

// propKind is the bound a limiter keeps.
type propKind int

const (
	propTAT     propKind = iota // burst + interval count over [t0, t1]: buckets, GCRA
	propFixed                   // limit per window, counted in the newest window admitted in
	propSliding                 // limit per run of buckets, counted in the newest bucket seen
	propLog                     // limit in (t-window, t], counted at the newest instant decided at
)

// propLimiter is what every limiter of the package offers: a Policy, and
// the bare answer of AllowN at an instant.
type propLimiter interface {
	sluice.Policy
	bareAllower
}

// propSubject is one limiter under test and the parameters of its bound.
type propSubject struct {
	name     string
	lim      propLimiter
	tb       *TokenBucket // when it is one: reservations too
	kind     propKind
	capacity int64         // burst or limit: a larger cost is never satisfiable
	iv, tau  int64         // propTAT
	window   time.Duration // propFixed, propLog; the run's length for propSliding
	bucket   time.Duration // propSliding
	unitRem  bool          // Remaining counts the unit requests still admitted at once
	fullAt   bool          // after Reset the limiter is whole again
}

type propAdmission struct {
	seq      int
	at       time.Duration // the instant its units are used
	eff      int64         // the window, bucket or instant it is counted in
	n        int64
	released bool
}

type propRelease struct {
	seq int
	adm int
}

type propOutstanding struct {
	ticket sluice.Ticket
	adm    int
	at     time.Duration
}

// propRun is one random run against one subject.
type propRun struct {
	t        *testing.T
	s        propSubject
	seed     uint64
	r        *rand.Rand
	now      time.Duration
	seq      int
	adms     []propAdmission
	rels     []propRelease
	out      []propOutstanding
	res      []reservation
	resAdm   []int
	trace    []string
	head     int64 // propSliding: newest bucket seen
	started  bool
	fwIdx    int64 // propFixed: window of the newest admission
	fwSet    bool
	logLast  time.Duration // propLog: newest instant decided at
	logSet   bool
	backward int
}

func (p *propRun) logf(format string, args ...any) {
	p.trace = append(p.trace, fmt.Sprintf(format, args...))
	if len(p.trace) > 40 {
		p.trace = p.trace[1:]
	}
}

func (p *propRun) fatalf(format string, args ...any) {
	p.t.Helper()
	p.t.Fatalf("%s seed %d: %s\nlast operations:\n  %s", p.s.name, p.seed, fmt.Sprintf(format, args...),
		strings.Join(p.trace, "\n  "))
}

// span returns a random duration of the scale of the limiter's window.
func (p *propRun) span() time.Duration {
	w := p.s.window
	if p.s.kind == propTAT {
		w = time.Duration(p.s.tau)
	}
	switch p.r.IntN(4) {
	case 0:
		return 0
	case 1:
		return time.Duration(p.r.Int64N(int64(max(w/8, 1)) + 1))
	case 2:
		return time.Duration(p.r.Int64N(int64(w) + 1))
	}
	return time.Duration(p.r.Int64N(int64(max(w/50, 1)) + 1))
}

// effective books a decision at now on the window limiters' clocks and
// returns where an admission at now is counted.
func (p *propRun) effective(now time.Duration, admitted bool) int64 {
	switch p.s.kind {
	case propFixed:
		idx := floorDiv(int64(now), int64(p.s.window))
		if p.fwSet {
			idx = max(idx, p.fwIdx)
		}
		if admitted {
			p.fwIdx, p.fwSet = idx, true
		}
		return idx
	case propSliding:
		b := floorDiv(int64(now), int64(p.s.bucket))
		if !p.started || b > p.head {
			p.head, p.started = b, true
		}
		return p.head
	case propLog:
		at := now
		if p.logSet {
			at = max(at, p.logLast)
		}
		p.logLast, p.logSet = at, true
		return int64(at)
	}
	return int64(now)
}

func (p *propRun) admit(at time.Duration, n int64, eff int64) int {
	p.seq++
	p.adms = append(p.adms, propAdmission{seq: p.seq, at: at, eff: eff, n: n})
	return len(p.adms) - 1
}

func (p *propRun) release(adm int) {
	p.seq++
	if p.adms[adm].released {
		p.fatalf("admission %d released twice", adm)
	}
	p.adms[adm].released = true
	p.rels = append(p.rels, propRelease{seq: p.seq, adm: adm})
}

// decide asks for n at now through one of the forms (Admit for how 0 and
// 1, Admit followed at once by a Success for 2, the bare allowNAt), checks the Decision when there is one, and books
// an admission.
func (p *propRun) decide(now time.Duration, n int64, how int) (sluice.Decision, bool) {
	ctx := context.Background()
	if n > 1 {
		ctx = sluice.WithCost(ctx, n)
	}
	var d sluice.Decision
	var tk sluice.Ticket
	full := true
	switch how {
	case 0, 1:
		d, tk = admit(p.s.lim, ctx, now)
	case 2:
		d = decideAt(p.s.lim, now, n)
	default:
		d.Allowed = p.s.lim.allowNAt(now, n)
		full = false
	}
	eff := p.effective(now, d.Allowed)
	p.logf("decide#%d at %v n=%d: allowed=%v remaining=%d reset=%v retry=%v", how, now, n, d.Allowed, d.Remaining, d.Reset, d.RetryAfter)
	if full {
		p.checkDecision(d, n)
	}
	if !d.Allowed {
		return d, false
	}
	i := p.admit(now, n, eff)
	if how <= 1 {
		if tk == 0 && p.s.kind != propTAT {
			p.fatalf("an admission's ticket is 0")
		}
		p.out = append(p.out, propOutstanding{ticket: tk, adm: i, at: now})
	}
	return d, true
}

func (p *propRun) checkDecision(d sluice.Decision, n int64) {
	p.t.Helper()
	if d.Limit != p.s.capacity {
		p.fatalf("Limit %d, want %d", d.Limit, p.s.capacity)
	}
	if d.Remaining < 0 || d.Remaining > d.Limit {
		p.fatalf("Remaining %d out of [0, %d]", d.Remaining, d.Limit)
	}
	if d.Reset < 0 {
		p.fatalf("Reset %v < 0", d.Reset)
	}
	switch {
	case d.Allowed:
		if d.RetryAfter != 0 || d.Cause != nil {
			p.fatalf("admitted with RetryAfter %v, Cause %v", d.RetryAfter, d.Cause)
		}
	case n > p.s.capacity:
		if !errors.Is(d.Cause, ErrNeverSatisfiable) || d.RetryAfter != 0 {
			p.fatalf("cost %d above %d: Cause %v, RetryAfter %v", n, p.s.capacity, d.Cause, d.RetryAfter)
		}
	default:
		if !errors.Is(d.Cause, sluice.ErrRateLimited) || errors.Is(d.Cause, ErrNeverSatisfiable) || d.RetryAfter <= 0 {
			p.fatalf("rejected: Cause %v, RetryAfter %v", d.Cause, d.RetryAfter)
		}
		if p.s.unitRem && d.Remaining >= n {
			p.fatalf("rejected a cost of %d with Remaining %d", n, d.Remaining)
		}
	}
}

// done ends a random outstanding admission with a random outcome.
func (p *propRun) done() {
	if len(p.out) == 0 {
		return
	}
	k := p.r.IntN(len(p.out))
	o := p.out[k]
	p.out = slices.Delete(p.out, k, k+1)
	outcome := []sluice.Outcome{sluice.Success, sluice.Failure, sluice.Ignored, sluice.Released, sluice.Released}[p.r.IntN(5)]
	latency := max(p.now-o.at, 0)
	if p.r.IntN(4) == 0 {
		latency += p.span() // reported late: gives back less, never more
	}
	p.logf("done %v of admission %d at %v latency %v", outcome, o.adm, p.now, latency)
	p.s.lim.Done(o.ticket, outcome, p.now, latency)
	if outcome == sluice.Released {
		p.release(o.adm)
	}
}

// step runs one random operation.
func (p *propRun) step() {
	switch op := p.r.IntN(20); {
	case op < 5:
		d := p.span()
		if p.r.IntN(20) == 0 {
			d = -d
			p.backward++
		}
		p.now += d
		p.logf("time %v", p.now)
	case op < 12:
		n := int64(1)
		if p.r.IntN(3) == 0 {
			n = 1 + p.r.Int64N(p.s.capacity+1)
		}
		d, ok := p.decide(p.now, n, p.r.IntN(4))
		if d.Policy == "" { // AllowNAt: no Decision
			return
		}
		switch {
		case !ok && n <= p.s.capacity && p.r.IntN(2) == 0:
			p.retry(d, n)
		case p.s.unitRem && p.r.IntN(4) == 0:
			p.drain(d, ok)
		case p.s.fullAt && p.r.IntN(8) == 0:
			p.whole(d)
		}
	case op < 16:
		p.done()
	case op < 19 && p.s.tb != nil:
		p.reserveOrCancel()
	}
}

// retry checks a rejection's RetryAfter: one nanosecond before it the
// request is still rejected, at it admitted, nothing else happening between.
func (p *propRun) retry(d sluice.Decision, n int64) {
	before := p.now + d.RetryAfter - 1
	if d.RetryAfter > 1 {
		if d2, ok := p.decide(before, n, 2); ok {
			p.fatalf("admitted %d at %v, before the RetryAfter %v of a rejection at %v (%+v)", n, before, d.RetryAfter, p.now, d2)
		}
	}
	p.now += d.RetryAfter
	if _, ok := p.decide(p.now, n, 2); !ok {
		p.fatalf("rejected %d at %v, the RetryAfter %v of a rejection", n, p.now, d.RetryAfter)
	}
}

// drain checks Remaining: exactly that many unit requests more are admitted
// at the same instant.
func (p *propRun) drain(d sluice.Decision, ok bool) {
	for i := range min(d.Remaining, 64) {
		if _, ok := p.decide(p.now, 1, 2); !ok {
			p.fatalf("unit request %d of Remaining %d rejected", i+1, d.Remaining)
		}
	}
	if d.Remaining <= 64 {
		if _, ok := p.decide(p.now, 1, 2); ok {
			p.fatalf("unit request %d admitted beyond Remaining %d", d.Remaining+1, d.Remaining)
		}
	}
}

// whole checks Reset: once it has passed, the limiter is whole again.
func (p *propRun) whole(d sluice.Decision) {
	p.now += d.Reset
	d2, ok := p.decide(p.now, 1, 2)
	if !ok || d2.Remaining != p.s.capacity-1 {
		p.fatalf("at the Reset %v of %+v: %+v, want whole", d.Reset, d, d2)
	}
}

// reserveOrCancel reserves tokens of a TokenBucket, or cancels a
// reservation.
func (p *propRun) reserveOrCancel() {
	if len(p.res) > 0 && p.r.IntN(2) == 0 {
		k := p.r.IntN(len(p.res))
		r, i := p.res[k], p.resAdm[k]
		p.res, p.resAdm = slices.Delete(p.res, k, k+1), slices.Delete(p.resAdm, k, k+1)
		p.logf("cancel reservation %d at %v", i, p.now)
		r.cancelAt(p.now)
		// Whatever CancelAt gives back is at most the reservation's tokens.
		p.release(i)
		return
	}
	n := 1 + p.r.Int64N(p.s.capacity)
	r := p.s.tb.reserveNAt(p.now, n)
	if !r.ok {
		p.fatalf("reservation of %d refused", n)
	}
	at := p.now + r.delayFrom(p.now)
	p.logf("reserve %d at %v: act %v", n, p.now, at)
	i := p.admit(at, n, int64(at))
	p.res, p.resAdm = append(p.res, r), append(p.resAdm, i)
}

// check verifies the subject's bound over every interval of the run.
func (p *propRun) check() {
	switch p.s.kind {
	case propTAT:
		p.checkTAT()
	case propFixed:
		p.checkGrouped(func(a propAdmission) int64 { return a.eff }, 1)
	case propSliding:
		nb := int64(p.s.window / p.s.bucket)
		p.checkGrouped(func(a propAdmission) int64 { return a.eff }, nb)
	case propLog:
		p.checkGrouped(func(a propAdmission) int64 { return a.eff }, int64(p.s.window))
	}
}

// checkTAT checks, for any set S of admissions with instants in [t0, t1],
// that their cost less what was released between the first and the last of
// them is at most τ + (t1 - t0), in nanoseconds of the interval: each
// admission moves the TAT up by its cost, within τ of its instant, and only
// releases move it down, by no more than they took.
func (p *propRun) checkTAT() {
	adms := slices.Clone(p.adms)
	slices.SortStableFunc(adms, func(a, b propAdmission) int { return int(a.at - b.at) })
	refundAt := make([]int64, p.seq+2) // refundAt[s]: allowance released at seq < s
	for _, r := range p.rels {
		refundAt[r.seq+1] += p.adms[r.adm].n * p.s.iv
	}
	for s := 1; s < len(refundAt); s++ {
		refundAt[s] += refundAt[s-1]
	}
	for i := range adms {
		sum, lo, hi := int64(0), adms[i].seq, adms[i].seq
		for j := i; j < len(adms); j++ {
			sum += adms[j].n * p.s.iv
			lo, hi = min(lo, adms[j].seq), max(hi, adms[j].seq)
			refund := refundAt[hi] - refundAt[lo+1]
			if span := int64(adms[j].at - adms[i].at); sum-refund > p.s.tau+span {
				p.fatalf("admitted %d tokens' worth (%dns, %dns given back) over [%v, %v]: more than burst and refill (%dns)",
					sum/p.s.iv, sum, refund, adms[i].at, adms[j].at, p.s.tau+span)
			}
		}
	}
}

// checkGrouped checks that the admissions counted in any run of width
// consecutive values of eff, less those released, are at most the limit.
func (p *propRun) checkGrouped(eff func(propAdmission) int64, width int64) {
	adms := slices.Clone(p.adms)
	slices.SortStableFunc(adms, func(a, b propAdmission) int {
		return int(eff(a) - eff(b))
	})
	for i := range adms {
		sum := int64(0)
		for j := i; j < len(adms) && eff(adms[j])-eff(adms[i]) < width; j++ {
			if !adms[j].released {
				sum += adms[j].n
			}
			if sum > p.s.capacity {
				p.fatalf("%d units counted in [%d, %d], more than the limit %d", sum, eff(adms[i]), eff(adms[j]), p.s.capacity)
			}
		}
	}
}

// propSeeds runs f for the seeds of a property from 1: the first minSeeds
// whatever the time they take, so that every machine tries them, then as
// many more as fit in budget.
func propSeeds(t *testing.T, budget time.Duration, f func(seed uint64)) {
	start := time.Now()
	runs := 0
	for seed := uint64(1); (seed <= minSeeds || time.Since(start) < budget) && !t.Failed(); seed++ {
		f(seed)
		runs++
	}
	t.Logf("%d runs", runs)
}

// minSeeds is how many seeds a property tries on any machine.
const minSeeds = 50

func propBudget(t *testing.T) time.Duration {
	if testing.Short() {
		return 100 * time.Millisecond
	}
	return 400 * time.Millisecond
}

// randomRate returns a rate and burst of a few shapes: whole intervals,
// intervals rounded up, tiny and large bursts.
func randomRate(r *rand.Rand) (Rate, int64) {
	rates := []Rate{PerSecond(10), PerSecond(3), PerSecond(7), Every(time.Millisecond), Rate{Count: 100, Period: time.Minute}, {Count: 3, Period: 10}}
	return rates[r.IntN(len(rates))], []int64{1, 2, 3, 5, 10, 40}[r.IntN(6)]
}

func runProp(t *testing.T, seed uint64, steps int, make func(r *rand.Rand) propSubject) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	s := make(r)
	p := &propRun{t: t, s: s, seed: seed, r: r, now: time.Duration(r.Int64N(1e12)) - 5e11}
	for range steps {
		p.step()
	}
	p.check()
}

func TestPropertyTATLimiters(t *testing.T) {
	subjects := []func(r *rand.Rand) propSubject{
		func(r *rand.Rand) propSubject {
			rt, burst := randomRate(r)
			g, err := NewGCRA(rt, burst)
			if err != nil {
				t.Fatal(err)
			}
			return propSubject{name: "gcra " + rt.String(), lim: g, kind: propTAT, capacity: burst,
				iv: g.cfg.Load().iv, tau: g.cfg.Load().tau, unitRem: true, fullAt: true}
		},
		func(r *rand.Rand) propSubject {
			rt, burst := randomRate(r)
			tb, err := NewTokenBucket(rt, burst)
			if err != nil {
				t.Fatal(err)
			}
			c := tb.cfg.Load()
			return propSubject{name: "token bucket " + rt.String(), lim: tb, tb: tb, kind: propTAT, capacity: burst,
				iv: c.iv, tau: c.tau, unitRem: true, fullAt: true}
		},
		func(r *rand.Rand) propSubject {
			rt, burst := randomRate(r)
			b, err := NewLeakyBucket(rt, burst)
			if err != nil {
				t.Fatal(err)
			}
			return propSubject{name: "leaky bucket " + rt.String(), lim: b, kind: propTAT, capacity: burst,
				iv: b.cfg.Load().unit, tau: b.cfg.Load().full, unitRem: true, fullAt: true}
		},
		func(r *rand.Rand) propSubject {
			// Not at nanosecond intervals: there the cost of each unit
			// request, rounded up to the nanosecond on its own, adds up to
			// more than Remaining reckons for them together.
			rt, burst := randomRate(r)
			for rt.Period < time.Microsecond {
				rt, burst = randomRate(r)
			}
			w, err := NewWarmUp(rt, burst, time.Duration(int64(1+r.IntN(20))*interval(rt)*burst), 2+r.Int64N(5))
			if err != nil {
				t.Fatal(err)
			}
			return propSubject{name: "warm-up " + rt.String(), lim: w, kind: propTAT, capacity: burst,
				iv: w.iv, tau: w.tau, unitRem: true}
		},
	}
	for i, make := range subjects {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			propSeeds(t, propBudget(t), func(seed uint64) { runProp(t, seed, 400, make) })
		})
	}
}

func TestPropertyWindowLimiters(t *testing.T) {
	windows := []time.Duration{time.Second, 10 * time.Millisecond, 3 * time.Minute}
	limits := []int64{1, 2, 5, 10, 30}
	subjects := []func(r *rand.Rand) propSubject{
		func(r *rand.Rand) propSubject {
			limit, window := limits[r.IntN(len(limits))], windows[r.IntN(len(windows))]
			w, err := NewFixedWindow(limit, window)
			if err != nil {
				t.Fatal(err)
			}
			return propSubject{name: fmt.Sprintf("fixed window %d/%v", limit, window), lim: w, kind: propFixed,
				capacity: limit, window: window, unitRem: true, fullAt: true}
		},
		func(r *rand.Rand) propSubject {
			limit, window := limits[r.IntN(len(limits))], windows[r.IntN(len(windows))]
			nb := []int{1, 2, 4, 10}[r.IntN(4)]
			w, err := NewSlidingWindow(limit, window, nb)
			if err != nil {
				t.Fatal(err)
			}
			return propSubject{name: fmt.Sprintf("sliding window %d/%v in %d", limit, window, nb), lim: w, kind: propSliding,
				capacity: limit, window: window, bucket: window / time.Duration(nb), unitRem: true, fullAt: true}
		},
		func(r *rand.Rand) propSubject {
			limit, window := limits[r.IntN(len(limits))], windows[r.IntN(len(windows))]
			l, err := NewSlidingLog(limit, window)
			if err != nil {
				t.Fatal(err)
			}
			return propSubject{name: fmt.Sprintf("sliding log %d/%v", limit, window), lim: l, kind: propLog,
				capacity: limit, window: window, unitRem: true, fullAt: true}
		},
	}
	for i, make := range subjects {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			propSeeds(t, propBudget(t), func(seed uint64) { runProp(t, seed, 400, make) })
		})
	}
}
