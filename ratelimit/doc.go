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
// the adapters' headers. A limiter decides through a Guard, even used alone
// (sluice.New(sluice.With(limit)), then Do or Begin): the Guard reads the
// clock, takes the cost from the context and ends each admission. Only the
// token bucket also has methods of its own (Allow, Wait, and their N and …At
// forms), for parity with golang.org/x/time/rate. Every constructor
// validates its parameters and options and returns an error, and no limiter
// admits extra when the clock jumps backwards.
package ratelimit
