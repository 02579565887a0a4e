// Package breaker stops calling a dependency that is failing, so the caller
// fails fast instead of piling up on it, and lets a few calls through now
// and then to notice its recovery.
//
// Three policies, all sluice.Policy values for a Guard's chain; one used
// alone goes in a Guard of its own (sluice.New(sluice.With(b)), then Do or
// sluice.Execute, as gobreaker's Execute):
//
//   - Breaker: the circuit breaker state machine (closed, open, half-open)
//     with a generation counter. Its trip strategies (consecutive failures,
//     error ratio, error count, slow-call ratio, any combination) look at a
//     window of the last N calls (WithCountWindow) or of the last stretch of
//     time (WithRollingWindow), each with a minimum volume. It stays open
//     for a fixed duration or a capped exponential backoff, optionally
//     jittered, then admits a set number of probes. ForceOpen, ForceClose,
//     Reset and OpenFor steer it by hand; listeners hear every state
//     change, outside its lock.
//   - Adaptive: Google SRE client-side throttling, rejecting a growing share
//     of requests as the dependency accepts fewer of them, with no open
//     state.
//   - Group: one Breaker per resource or key, made on demand, capped in
//     number. Its OpenFor holds open the breaker of one request's key,
//     as the adapters do when a dependency's Retry-After or RetryInfo asks
//     to hold off.
//
// A rejection matches sluice.ErrRejected and sluice.ErrCircuitOpen, and
// sluice.RejectionOf reads its RetryAfter: the time until the breaker lets a
// probe through.
//
// # Defaults
//
// Without trip options a Breaker, and each breaker of a Group, trips at 5
// consecutive failures, or sooner when calls stall (see
// WithConsecutiveFailures), stays open 1s, and closes after one successful
// probe. A run of failures is the quickest sign that tells an outage from
// noise: a window's ratio must first outweigh the healthy calls it holds.
// And a dependency that stops answering shows first as calls that do not
// come back: the stall check refuses calls before the first of them times
// out. Replayed on a manual clock (300 calls/s on two routes, a 100 ms
// call deadline, a dependency turning from 20 ms to 2 s; 20 seeds,
// medians), one breaker for the dependency opens 50 ms after it turns
// sick, 16 calls into it (70 ms and 22 calls when the calls it was
// answering still answer in 20 ms), and a Group's breaker per route,
// seeing half the calls, after 65 to 88 ms and 18 to 26 calls; the fifth
// timeout in a row alone took 93 to 140 ms and 32 to 42 calls, an error
// ratio of 0.5 over the last 100 calls 230 ms, and 420 ms per route. On a
// dependency failing 1% of calls at random, with a fixed or a spread
// latency, it did not open in 800,000 calls, nor when that dependency
// turned from 20 ms to 40 ms for 5 s (slower, with its connections 75%
// busy). The short open
// duration brings callers back within 2 s of the dependency's healing, while
// a sick one gets one probe a second. A probe that hangs, as the calls that
// opened the breaker may, counts as failed once its wait has passed since
// the last probe was admitted: the open duration, or twice the usual
// latency of a success or the slow-call threshold when longer (the usual
// latency is learnt by the consecutive-failure strategy; without it, 10 s).
// The breaker then opens again and probes again, rather than rejecting
// every call for as long as one call hangs; its next probe waits twice as
// long (up to 10 s, the longest open duration or the slow-call threshold,
// whichever is longest), so that a dependency that came back slower for
// good closes it again.
//
// # What counts
//
// Inside a Guard, a call's outcome comes from the Guard's sluice.Classifier:
// by default any error is a failure except a sluice rejection and the
// caller's context.Canceled, which are ignored and never push a breaker open.
// A call that another policy of the chain rejected after the breaker admitted
// it is Released: the breaker gives its probe slot back and counts nothing.
// So a rate limiter behind the breaker that rejects most calls, while the
// dependency is healthy, never opens it.
//
// # Speed
//
// A closed Breaker takes no lock: Admit loads one pointer (and, with the
// consecutive-failure strategy, counts the first call of each millisecond
// for the stall check), Done updates its window with atomic adds, and a
// Guard reads the end clock only when a strategy needs the time (a rolling
// window or a slow-call threshold; the default's stall check reads it
// itself, at most once a millisecond). Open, it fails fast on one clock
// read and two loads.
//
// # Which engine
//
// Pick this package's Breaker for new code: it is several times faster than
// gobreaker on the success path and allocates nothing, takes an injected
// clock, offers the ratio, count and slow-call strategies, backoff and
// several probes, drops late outcomes by generation, and calls its listeners
// outside its lock. Pick package gobreakeradapter when a team already runs
// sony/gobreaker with tuned Settings (a custom ReadyToTrip, bucketed
// counts) and wants the Guard and middleware without changing how the
// breaker trips (what failed is the Guard's Classifier's to say, in place of
// an IsSuccessful); it costs gobreaker's mutex, clock reads and one
// allocation per call.
package breaker
