// Package ratelimit holds sluice's local rate limiters. Most services want
// NewTokenBucket (or NewGCRA, the same bound in one word), put in a Guard:
//
//	limit, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(100), 20)
//	g, err := sluice.New(sluice.With(limit))
//	err = g.Do(ctx, call)
//
// For one limit per client, user or API key, NewKeyed keeps a limiter per
// key (read from the request's context, sluice.WithKey), with bounded
// memory. The other algorithms, one a file: NewFixedWindow, NewSlidingWindow
// (a ring of buckets), NewSlidingLog (exact), NewLeakyBucket (a meter),
// NewShaper (a queue that delays requests instead of rejecting them) and
// NewWarmUp (a rate that ramps up from cold).
//
// Every limiter is a sluice.Policy: a Guard hands its Admit the instant it
// read, and the Decision carries Limit, Remaining, Reset and RetryAfter for
// the adapters' headers. Outside a Guard, Allow and AllowN decide by the
// limiter's clock (WithClock). Only the token bucket also has …At forms that
// take the instant, as golang.org/x/time/rate does. Every constructor
// validates its parameters and options and returns an error, and no limiter
// admits extra when the clock jumps backwards.
package ratelimit
