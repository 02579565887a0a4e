package adaptive

import (
	"math"
	"time"
)

// The settings of the limit a Shedder learns. They are not options: the
// point of the Shedder is that nothing about the service needs telling.
const (
	// gradWindow is the shortest sampling window, and gradMinSamples the
	// fewest requests that end one.
	gradWindow     = 100 * time.Millisecond
	gradMinSamples = 10
	// gradTolerance is how far above the baseline a window's average
	// latency may be before the limit shrinks: past the knee of a pool of
	// 16, each request more in flight adds a sixteenth, and the limit
	// settles 1 or 2 over the pool, queued in front of it. Those few keep
	// the pool busy while the requests that follow them come in: at 1.05
	// the limit settled at the pool's size half the time, and the
	// overload program's pool at twice its capacity served 0.2 % less;
	// at 1.1 its admitted p99 at four times came within 1 ms of the
	// 40 ms goal, and went past it once in five runs.
	gradTolerance = 1.075
	// gradProbeEvery is how soon the baseline is measured again while the
	// limit binds; the first probe comes after gradFirstProbe windows,
	// because the initial limit may already be past capacity, and the
	// second gradProbeSoon after it, to check the first (taken in a
	// passing slowdown, it would hold the limit too high). Each probe
	// that finds the baseline where it was (within the tolerance) doubles
	// the wait for the next, up to gradProbeMax: the slots a probe idles
	// are goodput lost under a surge. Once a probe has found it where it
	// was, a window whose latency is within the tolerance of the baseline
	// confirms it as well as a probe would, and puts the next probe off,
	// up to gradProbeMax after the last. A limit that falls to half what a
	// probe left it at, though, probes again once gradProbeSoon has passed
	// since: a baseline that rose (a dependency turned slower for good)
	// reads as a queue that no limit cuts, and the limit would sink to its
	// floor until the next probe.
	gradProbeEvery = 5 * time.Second
	gradProbeMax   = 40 * time.Second
	gradProbeSoon  = time.Second
	gradFirstProbe = 2
	// probeBinds is how many windows in a row the limit must bind for a
	// probe to run: a burst that fills the limit once is no overload, and
	// a probe then would only shed what the service could carry.
	probeBinds = 3
	// probeDepth: a probe runs at the limit divided by it, low enough to
	// fall under the knee of a service run at tolerance; a limit further
	// past the knee is found by the probe's descent (see probed). Every
	// request a probe holds back waits for it, and at capacity that wait
	// does not drain: probes at a quarter of the limit made the simulated
	// pool at its capacity reject 4.3 % of its requests, at half 2.1 %.
	// Under a surge the slots a probe leaves idle are goodput lost: the
	// simulated pool at twice its capacity served 99.3 % of it with a
	// probe at half the limit every 5 s, 99.7 % at three quarters, as
	// without probes.
	probeDepth = 4.0 / 3
	// gradDescend: a probe at 1/k of the concurrency before it that cut the
	// latency to at most gradDescend/k of it was still above the knee, where
	// latency grows in proportion to concurrency: the next probe halves its
	// limit again.
	gradDescend = 1.2
	// gradInitial is the limit before the first window, and gradMax the
	// highest; the lowest is one over the processors (see newGradient).
	gradInitial = 20
	gradMax     = 1000
	// gradNoise is how many standard errors of a window's average its
	// rise must pass for the limit to move down: a window of 20 latencies
	// of a service with no queue passes 2 in about one in forty.
	gradNoise = 2
)

// gradient learns a concurrency limit from the latency of the requests it
// admits, against a baseline (the latency with no queue) that it measures
// in probes: windows run at a reduced limit. See the package doc.
//
// It is driven by plain figures, one window at a time, under its owner's
// lock: update takes the window's average latency, how many requests it
// measured, the most that were in flight at once and the instant it ended,
// and returns the limit for the next window.
type gradient struct {
	limit float64
	floor float64       // the lowest limit
	low   float64       // the lowest a probe goes: the processors
	base  time.Duration // 0 until the first window
	// measured: a probe has measured base, which is no longer the first
	// windows' guess.
	measured bool

	windows   int           // windows ended, up to gradFirstProbe
	binds     int           // windows in a row in which the limit bound
	nextProbe time.Duration // instant the next probe is due, once scheduled
	every     time.Duration // the wait for the next probe after the last one
	probedAt  time.Duration // the instant the last probe ended
	after     float64       // the limit the last probe resumed from
	probe     int64         // the probe's limit while one runs; 0 otherwise
	saved     float64       // the limit before the probe
	savedAvg  time.Duration // the average latency at that limit
	probeAvg  time.Duration // the average of the step before this probe's
	probeConc float64       // and the concurrency it ran at
	probeSE   time.Duration // the standard error of probeAvg
	savedSE   time.Duration // and of savedAvg
	steps     int           // the halvings of the probe running
	// cv is the usual standard error of a window's average, relative to
	// the average (see spread).
	cv float64
	// asked: the probe running was asked for by a rise in latency while
	// the limit did not bind, at askedAt, the last such.
	asked   bool
	askedAt time.Duration
}

// newGradient returns a gradient for a server of procs processors: its
// limit never goes below procs+1, and its probes go down to procs. A
// server with procs processors needs that many requests running to keep
// them busy, and a latency that rises below it comes from elsewhere; one
// more in flight keeps them busy while a request is off its processor (its
// yield, a network write), and a probe at procs measures the latency with
// no queue.
func newGradient(procs int) *gradient {
	p := float64(min(max(procs, 1), gradMax))
	f := min(p+1, gradMax)
	return &gradient{limit: max(gradInitial, f), floor: f, low: p}
}

// baseline returns the latency with no queue as last measured; 0 before the
// first window.
func (g *gradient) baseline() time.Duration { return g.base }

// probing reports whether the current window is a probe.
func (g *gradient) probing() bool { return g.probe > 0 }

// update returns the limit for the next window, given the window that just
// ended at now: its average latency avg and the most requests in flight at
// once, maxInflight.
func (g *gradient) update(avg, se time.Duration, maxInflight int64, now time.Duration, bound, running bool) int64 {
	avg = max(avg, 1)
	if g.probe > 0 {
		if bound {
			return g.unasked(avg, now)
		}
		return g.probed(avg, se, now, running)
	}
	// The window's average, less and plus its noise: the latencies of a
	// service whose dependency answers a tenth of its calls ten times
	// slower scatter a window's average by a third either way, and a
	// limit moved by each would be cut by that noise alone. A window's own
	// spread is no less than the service's usual one relative to its
	// average: one in eight of such windows holds no slow call.
	se = g.spread(avg, se, true)
	noise := time.Duration(gradNoise * float64(se))
	low, high := max(avg-noise, 1), avg+noise
	switch {
	case g.base == 0:
		g.base = avg
	case high < g.base:
		// A quicker window lowers the baseline, by a part of the way only:
		// one lucky window should not set it.
		g.base -= (g.base - high) / 4
	}
	binding := float64(maxInflight) >= math.Floor(g.limit)
	if binding {
		g.binds++
	} else {
		g.binds = 0
	}
	ratio := float64(avg) / float64(g.base)
	// The limit moves by the gradient tolerance/ratio: up while latency
	// stays near the baseline and the limit binds, down in proportion
	// once a queue forms, from what was in use; by at most half, or double,
	// in one window, or by half. A rise within the window's noise moves it
	// neither way.
	grad := min(max(gradTolerance/ratio, 0.5), 1.5)
	if grad < 1 {
		grad = min(max(gradTolerance/(float64(low)/float64(g.base)), 0.5), 1)
	}
	// A rise in latency while the limit does not bind may be a queue
	// forming behind it, or a dependency turned slower, which no limit
	// cuts: a probe tells them apart (see probed), unless most of the
	// window's latencies are bounds (deadlines, clients gone), which
	// would pass for a baseline.
	suspect := grad < 1 && !binding && !bound && g.windows == gradFirstProbe &&
		(g.askedAt == 0 || now-g.askedAt >= gradProbeSoon)
	switch {
	case grad < 1 && !suspect:
		g.limit = min(g.limit, float64(maxInflight)) * grad
	case binding && ratio <= gradTolerance:
		g.limit = max(g.limit*grad, g.limit+1)
	}
	g.limit = min(max(g.limit, g.floor), gradMax)

	if g.windows < gradFirstProbe {
		g.windows++
		if g.windows == gradFirstProbe {
			g.nextProbe = now
		}
	}
	if g.every > gradProbeEvery && ratio <= gradTolerance {
		g.nextProbe = max(g.nextProbe, min(now+g.every, g.probedAt+gradProbeMax))
	}
	if g.measured && g.limit < g.after/2 && now-g.probedAt >= gradProbeSoon {
		g.nextProbe = min(g.nextProbe, now) // the baseline may have risen
	}
	if suspect {
		g.asked, g.askedAt = true, max(now, 1)
		g.saved, g.savedAvg, g.probeAvg, g.probeConc = g.limit, avg, avg, float64(maxInflight)
		g.savedSE, g.probeSE, g.steps = se, se, 0
		g.probe = int64(max(g.low, min(g.limit, float64(maxInflight))/probeDepth))
		return g.probe
	}
	if g.windows == gradFirstProbe && now >= g.nextProbe {
		if g.binds < probeBinds {
			// No lasting queue behind this limit: no need to probe yet.
			g.nextProbe = now + gradWindow
			return g.current()
		}
		g.saved, g.savedAvg, g.probeAvg, g.probeConc = g.limit, avg, avg, float64(maxInflight)
		g.savedSE, g.probeSE, g.steps = se, se, 0
		g.probe = int64(max(g.low, g.limit/probeDepth))
		return g.probe
	}
	return g.current()
}

// probed ends a probe window with average avg: it halves the probe's limit
// while lowering it still cut the latency in proportion, and otherwise
// takes avg as the baseline and resumes from the saved limit, judged by its
// latency against the new baseline.
func (g *gradient) probed(avg, se, now time.Duration, running bool) int64 {
	se = g.spread(avg, se, false)
	asked := g.asked
	g.asked = false
	k := g.probeConc / float64(g.probe)
	// The latency before the probe's step and the step's own, each taken
	// the way that argues against a fall: a step that cut it only within
	// their noise did not cut it.
	before := float64(max(g.probeAvg-time.Duration(gradNoise*float64(g.probeSE)), 1))
	after := float64(avg + time.Duration(gradNoise*float64(se)))
	// Once a probe has measured the baseline, a later one that cut the
	// latency less than in proportion (within the tolerance) descends only
	// while its latency is still above the baseline by the tolerance: at or
	// under it, the probe is under the knee, where a pool of connections
	// serves at its baseline whatever the concurrency before. Descending
	// there idled half the pool for a window every few probes. A cut in
	// proportion still descends, so a baseline measured too high is found
	// out at the next probe.
	proportional := after <= gradTolerance/k*before
	// A probe whose cohort still ran at its cap knows only that its
	// latency is no less than the ages it counted: no fall, so no descent.
	if !running && float64(g.probe) > g.low && after <= gradDescend/k*before &&
		(!g.measured || proportional || float64(avg) > gradTolerance*float64(g.base)) {
		g.probeAvg, g.probeSE, g.probeConc = avg, se, float64(g.probe)
		g.probe = int64(max(g.low, float64(g.probe/2)))
		g.steps++
		return g.probe
	}
	g.probe = 0
	// The baseline rose when the probe's latency passed the last one by
	// more than its noise.
	rose := g.measured && float64(avg)-gradNoise*float64(se) > gradTolerance*float64(g.base)
	if g.measured && !rose && float64(g.base) <= gradTolerance*float64(avg) {
		g.every = min(2*g.every, gradProbeMax) // the baseline held
	} else {
		g.every = gradProbeEvery
	}
	g.nextProbe, g.probedAt = now+g.every, now
	if !g.measured {
		g.nextProbe = now + gradProbeSoon // to check the first
	}
	saved := max(g.savedAvg-time.Duration(gradNoise*float64(g.savedSE)), 1)
	last := g.base
	g.base, g.measured = avg, true
	switch {
	case asked && (g.steps == 0 || running):
		// Asked for by a rise the limit did not bind, and fewer in flight
		// were no quicker (or its cohort still ran: no quicker as far as
		// it knows): the rise is the service's latency, and the baseline
		// is no lower than the window that showed it, within its noise.
		// (Ten requests, the probe's, hold none of a tenth of slow calls
		// a third of the time.)
		g.base = max(avg, saved)
	case running:
		// Scheduled while the limit bound, so the window before it held
		// the queue: its cohort's ages tell no fall, and the baseline
		// stays where it was unless they pass it. Nor do they tell a
		// queue to cut: the limit resumes where it was, or where the
		// last measuring probe left it once they passed the baseline (a
		// dependency turned slower than the probe waits), and that probe's
		// resume point stays.
		g.base = max(avg, last)
		g.limit = g.saved
		if float64(avg) > gradTolerance*float64(last) {
			g.limit = max(g.limit, g.after)
		}
		g.limit = min(max(g.limit, g.floor), gradMax)
		return g.current()
	}
	if ratio := float64(saved) / float64(g.base); ratio > gradTolerance {
		g.limit = g.saved * gradTolerance / ratio
	} else {
		g.limit = g.saved
	}
	if rose {
		// The latency that sank the limit was the new baseline, not a
		// queue: the limit resumes from where the last probe left it,
		// and the next windows judge it against the new baseline.
		g.limit = max(g.limit, g.after)
	}
	g.limit = min(max(g.limit, g.floor), gradMax)
	g.after = g.limit
	return g.current()
}

// unasked ends at now a probe whose cohort's latencies were half or more bounds
// (deadlines that ended the calls, clients gone): they measure no
// baseline, and the limit is cut as the rise alone would have cut it, from
// the concurrency before the probe. The next probe comes no sooner than
// gradProbeSoon. (Taken for a baseline, a Guard's timeout would have
// passed for the service's latency, and a dependency that timed out every
// call, for a service with no queue.)
func (g *gradient) unasked(avg, now time.Duration) int64 {
	g.asked, g.probe = false, 0
	grad := min(max(gradTolerance/(float64(avg)/float64(g.base)), 0.5), 1)
	g.limit = min(max(min(g.saved, g.probeConc)*grad, g.floor), gradMax)
	g.nextProbe = max(g.nextProbe, now+gradProbeSoon)
	g.probedAt = now // nor does a limit under half the last probe's ask for one sooner
	return g.current()
}

// spread returns the standard error of a window's average avg, se as
// measured, and no less than the usual one relative to the average: a
// window of the quick calls alone of a service with a few slow ones
// measures almost none. learn takes se into the usual one.
func (g *gradient) spread(avg, se time.Duration, learn bool) time.Duration {
	usual := time.Duration(g.cv * float64(avg))
	if learn && avg > 0 {
		g.cv += (float64(se)/float64(avg) - g.cv) / 8
	}
	return max(se, usual)
}

// cancel ends a probe that measured nothing at now: the limit it saved
// holds, and the next probe is due a while later.
func (g *gradient) cancel(now time.Duration) {
	g.probe, g.asked = 0, false
	g.limit = g.saved
	g.nextProbe = max(g.nextProbe, now+gradProbeSoon)
	g.probedAt = now // as for unasked
}

func (g *gradient) current() int64 { return int64(g.limit) }
