package adaptive

import (
	"fmt"
	"math"
	"time"
)

// Algorithm is how a ConcurrencyLimit learns its limit: Gradient, AIMD or
// Fixed. Each is a struct of settings whose zero fields take the defaults.
type Algorithm interface {
	newEstimator() (estimator, error)
}

// windowSample summarises the requests that ended in one window.
type windowSample struct {
	avg         time.Duration // average latency
	count       int64         // requests that ended Success or Failure
	drops       int64         // Failures, and latencies over AIMD's Timeout
	maxInflight int64         // most requests in flight at once
}

// estimator turns each window's sample into the next limit. It is called
// under the ConcurrencyLimit's lock, one window at a time.
type estimator interface {
	// initial returns the limit before any window has ended.
	initial() float64
	// update returns the limit for the next window.
	update(s windowSample) float64
	// settings returns the sampling window, the samples a window needs at
	// least, and the latency above which a sample counts as a drop.
	settings() (window time.Duration, minSamples int64, dropAbove time.Duration)
	// baseline returns the estimator's idea of the unloaded latency; 0 if
	// it has none.
	baseline() time.Duration
	// probing reports whether the current window is a probe.
	probing() bool
}

// limits returns the limits an algorithm's fields give, zero fields taking
// the defaults. A default yields to the fields that are set: a defaulted
// MaxLimit is at least MinLimit, and a defaulted InitialLimit is brought
// within the bounds, so Gradient{MaxLimit: 10} starts at 10.
func limits(name string, initial, lo, hi, defInitial, defLo, defHi int) (float64, float64, float64, error) {
	if lo == 0 {
		lo = defLo
		if hi > 0 {
			lo = min(lo, hi)
		}
	}
	if hi == 0 {
		hi = max(defHi, lo)
	}
	if initial == 0 {
		initial = min(max(defInitial, lo), hi)
	}
	if lo < 1 || hi < lo || initial < lo || initial > hi {
		return 0, 0, 0, fmt.Errorf("adaptive: %s: want 1 <= MinLimit (%d) <= InitialLimit (%d) <= MaxLimit (%d)", name, lo, initial, hi)
	}
	return float64(initial), float64(lo), float64(hi), nil
}

func sampling(name string, window time.Duration, minSamples int) (time.Duration, int64, error) {
	if window == 0 {
		window = 500 * time.Millisecond
	}
	if minSamples == 0 {
		minSamples = 10
	}
	if window < 0 || minSamples < 0 {
		return 0, 0, fmt.Errorf("adaptive: %s: negative Window %v or MinSamples %d", name, window, minSamples)
	}
	return window, int64(minSamples), nil
}

// Gradient learns the limit from latency, in the manner of Netflix
// concurrency-limits' Gradient2: the limit grows while the average latency
// of a window stays within Tolerance of the baseline (the unloaded latency),
// and shrinks in proportion when latency rises above it, so that the queue
// the limit allows stays short.
//
// The baseline is the lowest window average seen since the last probe.
// After the second window, and every ProbeEvery windows after that, it is
// measured again: when the limit bound in the last window, the next window
// runs at half the limit (a probe; the initial limit may already be past
// capacity, so the first one comes early); when it did not, that window's
// average already is an unqueued latency and becomes the baseline. The
// baseline thus follows a dependency that became lastingly slower or faster,
// instead of drifting with the load as a long moving average does. While
// the limit does not bind, a rise in latency brings it down to what was in
// use, not below.
//
// Growth is 1, or 10% of the limit when larger, per window in which at least
// half the limit was in use; a shrink is at most by half per window. A probe
// window admits at most half the limit, so while the limit binds it costs up
// to half of one window's throughput every ProbeEvery windows.
//
// On a simulated server of 8 workers × 10 ms driven by 64 callers, the
// default settings settle at a limit of 8 to 9 within 15 windows (7.5 s),
// with an admitted latency of about 11 ms.
type Gradient struct {
	// InitialLimit is the limit before the first window ends; default 20.
	InitialLimit int
	// MinLimit and MaxLimit bound the limit; defaults 1 and 1000.
	MinLimit, MaxLimit int
	// Tolerance is how far above the baseline the window's average latency
	// may be without the limit shrinking; default 1.1 (10% above). It must be
	// at least 1.
	Tolerance float64
	// ProbeEvery is the number of windows between two probes of the
	// baseline; default 10 (5 s with the default window).
	ProbeEvery int
	// Window is the shortest sampling window; default 500 ms.
	Window time.Duration
	// MinSamples is the fewest requests that end a window; default 10.
	MinSamples int
}

type gradient struct {
	limit, lo, hi float64
	tol           float64
	probeEvery    int
	window        time.Duration
	minSamples    int64

	base         time.Duration
	windows      int
	probe        bool
	prevLimit    float64
	prevAvg      time.Duration
	prevInflight int64
}

func (g Gradient) newEstimator() (estimator, error) {
	initial, lo, hi, err := limits("Gradient", g.InitialLimit, g.MinLimit, g.MaxLimit, 20, 1, 1000)
	if err != nil {
		return nil, err
	}
	window, minSamples, err := sampling("Gradient", g.Window, g.MinSamples)
	if err != nil {
		return nil, err
	}
	tol := g.Tolerance
	if tol == 0 {
		tol = 1.1
	}
	if math.IsNaN(tol) || math.IsInf(tol, 0) || tol < 1 {
		return nil, fmt.Errorf("adaptive: Gradient: Tolerance %v must be at least 1", tol)
	}
	probe := g.ProbeEvery
	if probe == 0 {
		probe = 10
	}
	if probe < 2 {
		return nil, fmt.Errorf("adaptive: Gradient: ProbeEvery %d must be at least 2", probe)
	}
	return &gradient{limit: initial, lo: lo, hi: hi, tol: tol, probeEvery: probe,
		window: window, minSamples: minSamples}, nil
}

func (g *gradient) initial() float64 { return g.limit }

func (g *gradient) settings() (time.Duration, int64, time.Duration) {
	return g.window, g.minSamples, math.MaxInt64
}

func (g *gradient) baseline() time.Duration { return g.base }

func (g *gradient) probing() bool { return g.probe }

func (g *gradient) update(s windowSample) float64 {
	if s.avg <= 0 {
		s.avg = 1
	}
	// The limit binds when the window filled it; otherwise the latency is
	// not inflated by a queue this limit let in.
	binding := float64(s.maxInflight) >= math.Floor(g.limit)
	if g.probe {
		// The probe window ran at half the limit: its average is the new
		// baseline. The limit resumes from where it was, judged by the
		// latency it had then (when it bound) against the new baseline.
		g.probe = false
		g.base = s.avg
		g.limit = g.prevLimit
		s.avg, s.maxInflight = g.prevAvg, g.prevInflight
		binding = true
	} else if g.base == 0 || s.avg < g.base {
		g.base = s.avg
	}
	g.windows++
	due := g.windows%g.probeEvery == 2%g.probeEvery
	if due && !binding {
		// No need to probe: this window already ran without a queue of
		// ours, so its average is the baseline.
		g.base = s.avg
	}
	ratio := float64(s.avg) / float64(g.base)
	if ratio <= g.tol {
		if float64(s.maxInflight)*2 >= g.limit {
			g.limit += max(1, g.limit*0.1)
		}
	} else {
		next := g.limit * max(0.5, g.tol/ratio)
		if !binding {
			// Latency rose although the limit did not bind: come down to
			// what was in use, not below it, until a probe tells more.
			next = max(next, float64(s.maxInflight))
		}
		g.limit = next
	}
	g.limit = min(max(g.limit, g.lo), g.hi)
	if due && binding {
		g.probe = true
		g.prevLimit, g.prevAvg, g.prevInflight = g.limit, s.avg, s.maxInflight
		return max(g.lo, math.Ceil(g.limit/2))
	}
	return g.limit
}

// AIMD is the simpler choice: the limit grows by 1 per window in which at
// least half of it was in use and nothing dropped, and is multiplied by
// BackoffRatio after a window with a drop: a request that ended Failure, or
// one slower than Timeout.
type AIMD struct {
	// InitialLimit is the limit before the first window ends; default 20.
	InitialLimit int
	// MinLimit and MaxLimit bound the limit; defaults 1 and 1000.
	MinLimit, MaxLimit int
	// BackoffRatio multiplies the limit after a window with a drop; default
	// 0.9, in (0, 1).
	BackoffRatio float64
	// Timeout is the latency above which a request counts as a drop; default
	// 5 s.
	Timeout time.Duration
	// Window is the shortest sampling window; default 500 ms.
	Window time.Duration
	// MinSamples is the fewest requests that end a window; default 10.
	MinSamples int
}

type aimd struct {
	limit, lo, hi float64
	backoff       float64
	timeout       time.Duration
	window        time.Duration
	minSamples    int64
}

func (a AIMD) newEstimator() (estimator, error) {
	initial, lo, hi, err := limits("AIMD", a.InitialLimit, a.MinLimit, a.MaxLimit, 20, 1, 1000)
	if err != nil {
		return nil, err
	}
	window, minSamples, err := sampling("AIMD", a.Window, a.MinSamples)
	if err != nil {
		return nil, err
	}
	backoff := a.BackoffRatio
	if backoff == 0 {
		backoff = 0.9
	}
	if math.IsNaN(backoff) || backoff <= 0 || backoff >= 1 {
		return nil, fmt.Errorf("adaptive: AIMD: BackoffRatio %v must be in (0, 1)", backoff)
	}
	timeout := a.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	if timeout < 0 {
		return nil, fmt.Errorf("adaptive: AIMD: negative Timeout %v", timeout)
	}
	return &aimd{limit: initial, lo: lo, hi: hi, backoff: backoff, timeout: timeout,
		window: window, minSamples: minSamples}, nil
}

func (a *aimd) initial() float64 { return a.limit }

func (a *aimd) settings() (time.Duration, int64, time.Duration) {
	return a.window, a.minSamples, a.timeout
}

func (a *aimd) baseline() time.Duration { return 0 }

func (a *aimd) probing() bool { return false }

func (a *aimd) update(s windowSample) float64 {
	switch {
	case s.drops > 0:
		a.limit *= a.backoff
	case float64(s.maxInflight)*2 >= a.limit:
		a.limit++
	}
	a.limit = min(max(a.limit, a.lo), a.hi)
	return a.limit
}

// Fixed is a static limit: a bulkhead. NewBulkhead(n) is shorthand for a
// ConcurrencyLimit with Fixed{Limit: n}.
type Fixed struct {
	// Limit is the number of requests allowed in flight at once; at least 1.
	Limit int
}

type fixed struct{ limit float64 }

func (f Fixed) newEstimator() (estimator, error) {
	if f.Limit < 1 {
		return nil, fmt.Errorf("adaptive: Fixed: limit %d, want at least 1", f.Limit)
	}
	return &fixed{limit: float64(f.Limit)}, nil
}

func (f *fixed) initial() float64 { return f.limit }

func (f *fixed) settings() (time.Duration, int64, time.Duration) {
	return time.Second, 1, math.MaxInt64
}

func (f *fixed) baseline() time.Duration { return 0 }

func (f *fixed) probing() bool { return false }

func (f *fixed) update(windowSample) float64 { return f.limit }
