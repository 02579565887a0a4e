package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policywindow"
)

// WarmUp is a token bucket with a cold start: after the limiter has been idle,
// the rate it admits starts at rate/coldFactor and climbs to rate over the
// warm-up period, so that a service whose caches and connections have gone
// cold is not hit with its full rate at once.
//
// It follows the model of Guava's SmoothWarmingUp, also used by Sentinel's
// warm-up controller. With the stable interval T = Period/Count and the cold
// interval C×T (C the cold factor), the limiter keeps a store of "cold"
// permits between 0 and max. Idle time fills the store (it goes from empty to
// max in one warm-up period); each admitted request takes its permits from it.
// A permit taken while the store holds more than the threshold costs more
// than T, rising linearly to C×T at max; a permit taken below the threshold,
// or not from the store, costs T. The threshold is W/(2T) permits and max is
// threshold + 2W/((1+C)×T), so that under full load the store runs from max
// down to the threshold in exactly the warm-up period W.
//
// The cost of each request, in time, moves a theoretical arrival time (TAT)
// as in GCRA: a request of cost n is admitted when max(TAT, now) + n×T - now
// <= burst×T, and then moves TAT by its warm-up cost. A warm limiter is
// therefore exactly a token bucket of burst tokens at the rate; a cold one
// admits bursts and a rate C times smaller. It starts cold.
//
// Decisions take a short lock and allocate nothing. A clock that jumps
// backwards never admits extra. Create one with NewWarmUp; the zero value is
// not usable. A WarmUp is safe for concurrent use.
type WarmUp struct {
	mu     sync.Mutex
	tat    int64   // the instant the bucket is full again; emptyTAT at start
	stored float64 // cold permits in the store, 0..maxStored
	gen    uint64  // admissions so far
	last   warmUpAdmission
	since  time.Duration // the instant of the last SetLimit: releases of earlier admissions are dropped
	// coolPeriod, when not 0, is the warm-up period (ns) at which the
	// idle time since tat cools the limiter: SetLimit changed the period
	// since, at an instant it does not know, and the shortest of the
	// periods in force meanwhile is taken (the coldest).
	coolPeriod float64
	warmUpNums

	name string
}

// warmUpNums are a WarmUp's numbers, all changed at once by SetLimit.
type warmUpNums struct {
	iv, tau, burst int64
	cb             uint   // bits of the cost in a ticket
	cmask          uint64 // 1<<cb - 1
	rate           Rate
	warmUp         time.Duration
	coldFactor     int64
	threshold      float64 // permits below which a permit costs iv
	maxStored      float64
	slope          float64 // extra ns per permit above threshold, per permit
	coolDown       float64 // idle ns that add one permit to the store
}

// warmUpAdmission is the state before the latest admission, so that releasing
// it restores the limiter exactly.
type warmUpAdmission struct {
	valid     bool // not undone yet
	ticket    sluice.Ticket
	tatAfter  int64
	tatBefore int64
	stored    float64
	cool      float64 // coolPeriod before it
}

// Tickets of WarmUp carry the admission's generation in the high bits and its
// cost in the low cb ones: as many as the burst takes, up to
// warmUpMaxCostBits, so that the generation keeps 32 bits at least. Done
// takes a ticket for the latest admission's when the two are equal and the
// TAT is still where that admission left it: an earlier admission's ticket is
// equal only when a multiple of 2^(64-cb) admissions, 2^32 at least, came
// between it and the latest, and the two tickets carry the same cost.
const warmUpMaxCostBits = 32

// NewWarmUp returns a cold WarmUp limiter of r with bursts of up to burst
// requests once warm, warming up over warmUp from r/coldFactor to r. It
// returns an error when r is invalid, burst < 1, warmUp <= 0 or above
// 2^61ns (73 years), coldFactor < 2, or the cold interval or burst ×
// interval exceeds 2^62ns.
func NewWarmUp(r Rate, burst int64, warmUp time.Duration, coldFactor int64, opts ...Option) (*WarmUp, error) {
	nums, err := newWarmUpNums(r, burst, warmUp, coldFactor)
	if err != nil {
		return nil, err
	}
	o, err := buildOptions("warm-up", false, opts)
	if err != nil {
		return nil, err
	}
	w := &WarmUp{tat: emptyTAT, since: math.MinInt64, warmUpNums: nums, name: o.name}
	w.stored = w.maxStored
	return w, nil
}

func newWarmUpNums(r Rate, burst int64, warmUp time.Duration, coldFactor int64) (warmUpNums, error) {
	iv, tau, err := tolerance("warm-up", r, burst)
	if err != nil {
		return warmUpNums{}, err
	}
	switch {
	case warmUp <= 0:
		return warmUpNums{}, fmt.Errorf("ratelimit: warm-up: period %v must be positive", warmUp)
	case warmUp > time.Duration(maxTolerance/2):
		// A cold request's extra cost stays below the period: with the
		// tolerance it must still fit an instant.
		return warmUpNums{}, fmt.Errorf("ratelimit: warm-up: period %v spans more than 2^61ns", warmUp)
	case coldFactor < 2:
		return warmUpNums{}, fmt.Errorf("ratelimit: warm-up: cold factor %d must be at least 2", coldFactor)
	case coldFactor > maxTolerance/iv:
		return warmUpNums{}, errors.New("ratelimit: warm-up: cold interval spans more than 2^62ns")
	}
	cb := min(uint(bits.Len64(uint64(burst))), warmUpMaxCostBits)
	w := warmUpNums{iv: iv, tau: tau, burst: burst, cb: cb, cmask: 1<<cb - 1, rate: r,
		warmUp: warmUp, coldFactor: coldFactor}
	stable, cold, period := float64(iv), float64(coldFactor*iv), float64(warmUp)
	w.threshold = 0.5 * period / stable
	w.maxStored = w.threshold + 2*period/(stable+cold)
	w.slope = (cold - stable) / (w.maxStored - w.threshold)
	w.coolDown = period / w.maxStored
	return w, nil
}

// SetLimit changes the rate, the burst, the warm-up period and the cold
// factor, validated as NewWarmUp validates them: on an error nothing
// changes. The limiter keeps the instant it is full again, so a full one
// is full at its new size, and how cold it is, as a share of its new
// store of cold permits; the idle time before its next admission cools it
// at the shorter of the two warm-up periods, so it is never warmer than
// either would have it. Safe while requests are decided; when the rate
// changes, or the burst crosses a power of two, a request admitted before
// the limiter would be full again and released after the change gives
// nothing back.
func (w *WarmUp) SetLimit(r Rate, burst int64, warmUp time.Duration, coldFactor int64) error {
	defer policywindow.Changed() // once the new window is in place
	nums, err := newWarmUpNums(r, burst, warmUp, coldFactor)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tat != emptyTAT && (nums.iv != w.iv || nums.cb != w.cb) {
		// Tickets read otherwise now: every admission so far came before
		// the instant the limiter is full again, and its release, cut for
		// the old numbers, gives nothing back. Read the same, a ticket
		// gives back its stable cost, as at any time.
		w.since = time.Duration(w.tat)
	}
	w.stored = min(w.stored*nums.maxStored/w.maxStored, nums.maxStored)
	if w.tat != emptyTAT {
		p := float64(w.warmUp)
		if w.coolPeriod > 0 {
			p = w.coolPeriod
		}
		w.coolPeriod = min(p, float64(nums.warmUp))
	}
	w.warmUpNums = nums
	w.last.valid = false
	return nil
}

// Name returns the name given with WithName; default "ratelimit/warm-up".
func (w *WarmUp) Name() string { return w.name }

// rateWindow returns the time a warm limiter takes to refill its whole burst,
// burst × interval: the w of the RateLimit-Policy header field.
func (w *WarmUp) rateWindow() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Duration(w.tau)
}

// allowNAt decides on a request of cost n at now, taking its quota when it
// is admitted: the bare answer, with no ticket, of the step tables in tests.
func (w *WarmUp) allowNAt(now time.Duration, n int64) bool {
	_, _, ok := w.decide(int64(now), max(n, 1), false)
	return ok
}

// admitD decides as Admit does, with its answer as a Decision.
func (w *WarmUp) admitD(ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	d, t, _ := w.decide(int64(now), sluice.CostFrom(ctx), true)
	return d, t
}

// decide takes the quota of a request of cost n at now when it is allowed,
// and returns its Ticket and whether it was allowed. The Decision is filled
// in only when full is set.
func (w *WarmUp) decide(now, n int64, full bool) (sluice.Decision, sluice.Ticket, bool) {
	w.mu.Lock()
	nums := &w.warmUpNums
	tat := w.tat
	base := max(tat, now)
	// Idle time since the bucket was last full cools the limiter down.
	stored := w.stored
	if tat != emptyTAT && now > tat {
		coolDown := w.coolDown
		if w.coolPeriod > 0 {
			coolDown = w.coolPeriod / w.maxStored
		}
		stored = min(w.maxStored, stored+float64(now-tat)/coolDown)
	}
	if next := base + n*w.iv; n > w.burst || base-now > w.tau-n*w.iv { // next - now may overflow
		nums := *nums // read outside the lock: a copy SetLimit cannot change
		w.mu.Unlock()
		if !full {
			return sluice.Decision{}, 0, false
		}
		remaining, reset := nums.remaining(stored, now+nums.tau-nums.iv-base), time.Duration(base-now)
		if n > nums.burst {
			return never(w.name, nums.burst, remaining, reset), 0, false
		}
		return reject(w.name, nums.burst, remaining, reset, time.Duration(next-nums.tau-now)), 0, false
	}
	taken := min(float64(n), stored)
	next := base + w.cost(stored, taken, n)
	t := sluice.Ticket(w.gen << w.cb)
	if uint64(n) <= w.cmask {
		t |= sluice.Ticket(n) // a cost of 2^32 or more is left out (see Done)
	}
	w.last = warmUpAdmission{valid: true, ticket: t, tatAfter: next, tatBefore: tat, stored: w.stored, cool: w.coolPeriod}
	w.gen++
	w.tat = next
	w.stored = stored - taken
	w.coolPeriod = 0 // idle from now on is under the numbers in force
	if !full {
		w.mu.Unlock()
		return sluice.Decision{}, t, true
	}
	cp := *nums // read outside the lock: a copy SetLimit cannot change
	w.mu.Unlock()
	return allow(w.name, cp.burst, cp.remaining(stored-taken, now+cp.tau-cp.iv-next), time.Duration(next-now)), t, true
}

// remaining counts the unit requests that would still be admitted at once
// when the store holds stored and budget = now + τ - T - TAT: the first needs
// budget >= 0, each further one its warm-up cost more. Once warm every
// request costs T and the count is 1 + budget/T. While cold, the cost of j
// permits above the threshold is jT + slope×(a×j - j²/2), a the permits
// above it: the count is the smaller root of that quadratic, then exact
// costs settle the rounding.
func (w *warmUpNums) remaining(stored float64, budget int64) int64 {
	if budget < 0 {
		return 0
	}
	most := budget / w.iv // further requests cost at least T each
	if stored <= w.threshold || most == 0 {
		return most + 1
	}
	stable, b, a := float64(w.iv), float64(budget), stored-w.threshold
	var j float64
	if above := a*stable + w.slope*a*a/2; b >= above {
		j = a + (b-above)/stable
	} else {
		p := stable + w.slope*a
		j = (p - math.Sqrt(max(p*p-2*w.slope*b, 0))) / w.slope
	}
	fits := func(k int64) bool { return w.cost(stored, min(float64(k), stored), k) <= budget }
	k := min(max(int64(j), 0), most)
	for k < most && fits(k+1) {
		k++
	}
	for k > 0 && !fits(k) {
		k--
	}
	return k + 1
}

// cost returns, in ns, what n permits cost when taken of them come from a
// store holding stored: the area under the interval, which is T below the
// threshold and rises by slope per permit above it. That is n×T plus the
// extra area above the threshold between the store's levels before and
// after, each level's area rounded up on its own: the costs of requests
// taken one after another then add up to the cost of taking them at once,
// as Remaining counts them.
func (w *warmUpNums) cost(stored, taken float64, n int64) int64 {
	return n*w.iv + w.extra(stored) - w.extra(stored-taken)
}

// extra returns, rounded up to the ns, the area above T under the interval
// from an empty store up to a store holding stored: slope×a²/2 for the a
// permits above the threshold.
func (w *warmUpNums) extra(stored float64) int64 {
	a := stored - w.threshold
	if a <= 0 {
		return 0
	}
	return int64(math.Ceil(w.slope * a * a / 2))
}

// Done gives back, on sluice.Released, what Admit took: the latest admission
// is undone exactly, TAT and store alike; an earlier one gives back its
// stable cost less what has refilled in the latency since, unless its cost
// was 2^32 or more (with a burst that large), which its ticket cannot carry.
// Other outcomes change nothing.
func (w *WarmUp) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	if o != sluice.Released {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if now-max(latency, 0) <= w.since {
		return // admitted before a SetLimit, on other numbers
	}
	n := int64(uint64(t) & w.cmask)
	if w.last.valid && t == w.last.ticket && w.tat == w.last.tatAfter {
		w.tat, w.stored, w.coolPeriod = w.last.tatBefore, w.last.stored, w.last.cool
		w.last.valid = false
		return
	}
	if n == 0 || n > w.burst || w.tat == emptyTAT {
		return
	}
	if refund := releaseRefund(n, w.iv, latency); refund > 0 {
		w.tat -= refund
	}
}
