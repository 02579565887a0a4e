// Package ratelimit holds sluice's local rate limiters, one algorithm a file,
// each a sluice.Policy and usable on its own, and Keyed, which keeps one
// limiter per key with bounded memory.
//
// Every limiter answers a sluice.Decision with Limit, Remaining, Reset and
// RetryAfter, has …At(now) forms that take the monotonic instant instead of
// reading the clock, validates its parameters in its constructor, and never
// admits extra when the clock jumps backwards.
package ratelimit
