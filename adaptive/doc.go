// Package adaptive keeps a service standing in a surge by bounding the
// requests it runs at once, with a bound it learns from their latency
// rather than one set in advance.
//
// [NewShedder] is the load shedder to put in front of a service: with no
// options it protects a service bound by its CPU as well as one bound by a
// pool of connections or any other resource, without being told which, or
// its capacity. Its rejections match sluice.ErrOverloaded. [NewBulkhead]
// fixes the bound instead, for a resource whose size is known; its
// rejections match sluice.ErrConcurrencyLimited.
//
// # The limit
//
// A service runs at its best with just enough requests in flight to keep
// its bottleneck busy: fewer leave it idle, more only queue, on its CPU
// (the Go scheduler runs them by turns, so each one takes longer) or in
// front of its pool. Past that knee the latency of a request grows in
// proportion to the requests in flight, and that is the signal the
// Shedder reads: the latency of each admitted request, from the instant it
// took its slot to its end, so that a queue anywhere inside the service
// shows, the wait for a processor included.
//
// Every 100 ms (or 10 requests, when fewer end in that time) the Shedder
// compares the window's average latency with the baseline, the latency with
// no queue, and moves the limit by the gradient 1.075 × baseline / average:
// up while latency stays within 7.5% of the baseline and the limit binds
// (by at most half in a window), down in proportion from what was in use
// once a queue forms (by at most half). A rise within twice the standard
// error of the window's average (taken no smaller than the service's usual
// one, relative to the average, since a window can miss the slow calls that
// make it) moves it neither way: when a tenth of a service's calls take ten
// times the others (a dependency's slow answers), a window's average
// scatters by a third either way, and a limit moved by that noise would
// shed a load with no queue at all. It starts at 20, and never goes below
// GOMAXPROCS + 1: a CPU-bound server needs GOMAXPROCS requests running to
// keep its processors busy, and one more for the moments one of them is off
// its processor (its yield, a write to the network). A latency that rises
// below that comes from elsewhere (a noisy neighbour), and lowering the
// limit further would only cost throughput.
//
// The latencies a window averages are those of the requests that
// succeeded, and those of the requests that failed or counted for nothing
// (their client gone) that were no quicker than the baseline, counted as
// at most 4 baselines: a slow one held its slot that long, at least, and
// shows the queue even when its client gave up; a quick failure (a
// connection refused) says nothing of the service's latency unqueued, and a
// spell of them would otherwise set the baseline under it and shed a
// healthy load once they stop. The latency of a call that a deadline
// ended (the Guard's timeout, or its caller's), like that of one whose
// client went away, is a bound, not a measure: it ran that long at least.
//
// Latency is the Shedder's only signal, so it cannot tell at once a
// service slowed by its own load from one waiting on a dependency that
// turned slow. A rise while the limit does not bind is put to a probe (see
// below), at most once a second, rather than cut at once: fewer requests
// in flight that are no quicker mean a new baseline, and nothing is shed.
// A rise in windows half or more of whose latencies are bounds (timeouts),
// or one within a second of the last probe, cuts the limit; so does a probe
// half or more of whose requests ended at a deadline, which measured no
// baseline. Once the limit binds,
// a dependency turned slow sheds until the next probe finds it out.
// Breakers and timeouts answer that case; a Shedder shared by routes of
// which one calls a sick dependency sheds the others too, so give it the
// requests whose cost it should judge.
//
// The baseline cannot be learnt from the windows in which the limit binds:
// their latency already holds the queue the limit let in. Nor from the
// windows in which it does not bind: on a CPU-bound server the queue is in
// the scheduler, and a limit too high to bind still lets it form. So the
// Shedder measures it, in the manner of Envoy's adaptive concurrency
// filter: in a probe, the limit is three quarters of what it was, and the
// first 10 requests admitted under it (not those draining from the higher
// limit) are measured, each to its end; those still running a second after
// the probe began (or 4 baselines, when longer) count at their age, which
// tells no fall of the latency, and those a deadline ended are left out
// unless they are half the cohort or more (then the probe cuts). The first
// to end are the quick ones, and a probe that judged by them would measure
// a baseline under the service's when some of its calls are slow. A limit
// run at tolerance is near the knee, and a shallow probe leaves few slots
// idle under a surge. A probe that cut the
// latency nearly in proportion to the concurrency was still past the knee,
// and the next one probes at half of that again, down to GOMAXPROCS; once
// a baseline has been measured, a cut short of proportional descends only
// while the probe's latency is still above it by the tolerance (at the
// baseline, the probe is under the knee). The
// first probe comes once the limit has bound for 3 windows in a row (a
// burst that fills it once is no overload, and a probe then would only
// shed), the second a second later to check it (one taken in a passing
// slowdown would hold the limit too high), later ones 5 s apart while it
// keeps binding, twice as far apart after each probe that finds the
// baseline where it was, up to 40 s: the slots a probe idles are goodput
// lost. Once a probe has found the baseline where it was, a window whose
// latency is within the tolerance of it confirms it as a probe would, and
// puts the next probe off, up to 40 s after the last. A limit that falls
// to half what the last probe left it at probes again, no sooner than a
// second after it: a
// dependency turned slower for good reads as a queue no limit cuts, and
// once the probe has found the new baseline the limit resumes from where
// it was. A window quicker than the baseline lowers it, by a quarter of the
// way.
//
// # The queue
//
// A limit alone rejects the bursts of an open-loop load even below
// capacity, and leaves the bottleneck idle between a request's end and the
// next arrival. So the requests over the limit wait in a queue (at most
// 1000) under the discipline of CoDel with adaptive LIFO. A burst is held
// in arrival order, each request up to 200 ms: at its capacity a service
// sees Poisson arrivals run ahead of it for that long, and a request that
// waited so is still answered within a quarter of a second. The queue is
// overloaded when more requests entered it than left it for a slot, over
// the last 200 ms or the 200 ms before, by a quarter of what the slots
// serve in 200 ms: more load than they serve, not a burst. Overloaded and non-empty for 25 ms, it serves
// the newest first, so that a surge's first requests do not make all the
// later ones wait. Overloaded, non-empty for 50 ms, and with its oldest
// request older than 2.5 ms (CoDel's target) at every arrival for 100 ms
// (CoDel's interval), it is a standing queue: at capacity, Poisson arrivals
// fill the queue by turns and it drains between them, which a standing
// queue does not. It then gives a newcomer 2.5 ms, so that the requests
// admitted are fresh and the others learn early that they will not be. Requests
// marked sluice.PriorityCritical are served before all others, always
// wait up to 200 ms, and turn the newest other request out of a full
// queue: they are shed last. A bulkhead WithQueue uses the same
// discipline.
//
// # The scheduler
//
// On a server bound by its CPU, Go runs each handler to its end (a few
// milliseconds, under its 10 ms time slice), and the goroutines that read
// new requests wait for a processor behind the handlers: the queue forms
// in the scheduler, before any middleware sees the requests, and the
// handlers themselves run as fast as unloaded. A limit that reads the
// handlers' latency then never binds, and one that binds cannot help the
// requests it has not seen yet. So a request that takes a slot yields once
// before it runs, and runs behind the goroutines already runnable: those
// read their requests, find the slots taken and wait in the Shedder's queue
// instead, under its discipline, and the request's own wait for a
// processor counts in its latency, which runs from the instant it took its
// slot. It yields only when the requests in flight are at least as many
// as the processors: with fewer, a processor is left for the readers. A
// waiter is handed its slot by the Done that frees it, at that instant,
// and always yields: Go runs a goroutine woken by a channel ahead of every
// other runnable one on its processor. A Shedder without a queue does not
// yield: it has nowhere to hold the requests it would see.
//
// # Cost
//
// Admitting and rejecting allocate nothing and cost a few atomic
// operations, and admitting with a queue while the processors are all
// taken one yield to the scheduler; a request that waits in the queue
// allocates its timer. The package starts no goroutine. [SystemSampler]
// reads the CPU usage of the container from cgroup v2, cgroup v1 or
// /proc/stat, for what decides by it (a degrade.Auto switch); the Shedder
// does not use it.
package adaptive
