// Package sluice keeps a Go service standing when traffic surges or a
// dependency slows down.
//
// Start with a [Guard]: build one with [New] from policies given to [With],
// outer to inner, then run each call through it with [Guard.Do] or
// [Execute], and [Guard.Close] it when done:
//
//	limit, _ := ratelimit.NewTokenBucket(ratelimit.PerSecond(100), 20)
//	payments, _ := breaker.New("payments")
//	g, _ := sluice.New(sluice.With(limit, payments), sluice.WithTimeout(300*time.Millisecond))
//	defer g.Close()
//	err := g.Do(ctx, func(ctx context.Context) error { return callPayments(ctx) })
//
// A rejection matches errors.Is(err, ErrRejected) and exactly one of
// ErrRateLimited, ErrCircuitOpen, ErrOverloaded or ErrConcurrencyLimited;
// [RejectionOf] reads its [Decision] (the policy, the quota, when to retry).
// The middleware packages serve a Guard to net/http (middleware/http), Echo
// (middleware/echo) and gRPC (middleware/grpc), turning its decisions into
// 429 or 503 with Retry-After, or ResourceExhausted and Unavailable with
// RetryInfo.
//
// The cascade sluice prevents: a dependency turns slow, every call to it
// holds a goroutine (and a connection, and memory) for the whole slow
// response, the callers pile up, and the service that depended on it falls
// over too, then its own callers. sluice answers with the three classic
// tools, limit, break and degrade, composed into one chain:
//
//   - rate limiters (package ratelimit, and ratelimit/redis for a fleet),
//   - circuit breakers and adaptive client-side throttling (package breaker),
//   - fallbacks by cause, stale answers and degradation switches (package
//     degrade), which a Guard takes as its outermost layer with
//     [WithFallback], and call timeouts ([WithTimeout]),
//   - load shedding and adaptive concurrency limits (package adaptive).
//
// # One call path
//
// Every entry point runs a call the same way: [Guard.Begin] asks every
// policy, outer to inner, reading the monotonic clock once; the [Call] it
// writes into, which its caller keeps, carries the Guard's deadline in its
// Context; [Call.End] turns a passed deadline into a timeout error
// (matching [ErrTimeout]), classifies the call's error, tells every policy
// that admitted, and lets the Guard's fallbacks answer.
// Do, Execute and the adapters are that path, so a Guard behaves alike
// everywhere. When an inner policy rejects, the outer ones that already
// admitted are released, so no token, concurrency slot or half-open probe
// leaks.
//
// # Operating it live
//
// Every policy's numbers change while it runs, validated as its
// constructor validates them: a limiter's SetLimit, a breaker's or a
// Shedder's Reconfigure. A policy in shadow mode ([WithShadow],
// [Guard.SetShadow]) decides every call as when enforcing, but lets
// through the calls it would reject, and counts them
// ([PolicyStats].ShadowRejected, [CallEvent].Shadow): a new limit can be
// watched before it rejects anything.
//
// # Retries
//
// A Guard declared [WithRetry] tries a failed call again, with exponential
// backoff and full jitter, within the caller's deadline and a retry budget
// (10% of its calls by default). The layers compose in one order, outer to
// inner: the fallbacks, then the retries, then the policies of the chain.
// Each attempt is admitted afresh, so a breaker counts each as one call, and
// a rejection by the Guard's own policies (an open breaker, a spent limit)
// ends the retries; the fallbacks answer the last attempt's error. The
// sluicehttp Transport and the sluicegrpc client interceptors retry the same
// way, with the Guard of each target.
//
// # Writing a policy
//
// A [Policy] is four methods: Name; Admit, which answers a [Ticket], a
// [Quota] and a rejection's cause at the instant the Guard read; Done, told
// once how each admitted call ended; and
// Needs, which declares whether Admit may block ([Waits]), whether Done
// needs the end of each call ([NeedsEnd]) and whether the policy reads the
// call's resource ([NeedsResource]). A Guard none of whose policies needs
// the end reads the clock once per call instead of twice, and the client
// adapters name an outgoing call's resource in its context only for a
// Guard that reads it. The [Policy] example is a complete policy.
//
// Rejections allocate nothing: a Guard keeps one error per policy for the
// rejections whose answers agree to the millisecond, and reads their
// RetryAfter relative to the moment it is read.
//
// The root package and the policy packages import nothing but the standard
// library; transports and Redis live in their own packages.
package sluice
