// Package sluice keeps a Go service standing when traffic surges or a
// dependency slows down.
//
// The cascade it prevents: a dependency turns slow, every call to it holds a
// goroutine (and a connection, and memory) for the whole slow response, the
// callers pile up, and the service that depended on it falls over too, then its
// own callers. sluice answers with the three classic tools, limit, break and
// degrade, composed into one chain:
//
//   - rate limiters (package ratelimit, and ratelimit/redis for a fleet),
//   - circuit breakers and adaptive client-side throttling (package breaker),
//   - fallbacks by cause, stale answers and degradation switches (package
//     degrade), which a Guard takes as its outermost layer with
//     [WithFallback], and call timeouts ([WithTimeout]),
//   - a system-load guard and adaptive concurrency limits (package adaptive).
//
// Each of them is a [Policy]. A [Guard] runs a request through its policies,
// outer to inner, reading the monotonic clock once when the request arrives and
// once when it ends, and the policies take the instants it read. When an inner
// policy rejects, the outer ones that already admitted are released, so no
// token, concurrency slot or half-open probe leaks. A Guard on SystemClock
// whose policies need no end instant ([UntimedDone]: the in-memory rate
// limiters but Keyed, a breaker on a count window without a slow-call
// strategy) reads the clock once per request; such a breaker reads it
// itself when an outcome trips it or ends a half-open probe.
//
// A policy whose Admit may wait (a shaper, a queued concurrency limit) is a
// [Waiter]: the Guard reads the clock again after it, so the policies after it
// decide, and latencies are measured, from the end of the wait.
//
// A policy may also be a [FastPolicy]: an AdmitFast whose answer fits in
// registers, which a Guard calls in Admit's place, because a nine-word
// Decision returned through an interface call costs more than most policies'
// own work. The policies that decide in memory without waiting are (the
// list is at [FastPolicy]); a policy written elsewhere needs only Admit.
//
// Adapters and streams run a request themselves with [Guard.AdmitTo] (or
// [Guard.Admit]) and the [Done] it fills.
//
// Every rejection is a [*RejectedError] carrying the [Decision] that rejected:
// it matches errors.Is(err, ErrRejected) and exactly one of ErrRateLimited,
// ErrCircuitOpen, ErrOverloaded or ErrConcurrencyLimited; [RejectionOf]
// reads its Decision back out of an error that is or wraps one (not out of
// a Guard's timeout that wraps an inner Guard's rejection). The adapters in
// middleware/http, middleware/echo and middleware/grpc turn the cause (never
// an error string) into the wire answer: 429 or 503 with Retry-After, gRPC
// ResourceExhausted or Unavailable with RetryInfo.
//
// The root package and the policy packages import nothing but the standard
// library; transports and Redis live in their own packages.
package sluice
