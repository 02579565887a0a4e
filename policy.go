package sluice

import (
	"context"
	"time"
)

// Decision is what a Guard answers for one request, and what the adapters
// turn into response headers: the rejecting policy's answer, or, when every
// policy admitted, the one whose quota is tightest.
//
// The zero Decision rejects with no reason given; a Guard always fills it in.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Policy names the policy that decided, as its Name returns it:
	// "ratelimit/per-ip", "breaker/payments".
	Policy string
	// Limit is the quota of the window or bucket, in cost units; -1 where a
	// quota has no meaning (a breaker, a load shedder, a concurrency limit).
	Limit int64
	// Remaining is what is left of Limit after this decision; never negative.
	// It is 0 where Limit is -1.
	Remaining int64
	// Reset is the time until the quota is whole again; 0 if unknown.
	Reset time.Duration
	// RetryAfter is how long the caller should wait before trying again; 0 when
	// Allowed, and > 0 on a rejection whenever the policy can know it.
	RetryAfter time.Duration
	// Cause is nil when Allowed. On a rejection it is, or wraps, exactly one of
	// ErrRateLimited, ErrCircuitOpen, ErrOverloaded, ErrConcurrencyLimited, or
	// ErrTimeout.
	Cause error
}

// Policy is one link of a Guard's chain. A rate limiter, a breaker, a load
// shedder and a concurrency limit are each one; a custom policy implements
// these four methods (see the example, a complete policy).
//
// A Guard calls Admit once per request with the monotonic instant it read
// when the request arrived, and, for every Admit that admitted, Done exactly
// once when the request has ended. Implementations must be safe for
// concurrent use, and should not read the clock on this path: the Guard
// hands them its instants. (One that declares no NeedsEnd may read it now
// and then in Done, to time a call it samples.)
type Policy interface {
	// Name identifies the policy in decisions, errors and observers. A Guard
	// reads it once, when it is built.
	Name() string
	// Admit decides on one request at the monotonic instant now. It admits
	// with a nil error, the Ticket that Done will be handed back, and the
	// policy's quota after the decision. It rejects with the cause as the
	// error (one of those Decision.Cause names), and, in the Quota, how
	// long the caller should wait. A policy that declares Waits may block
	// in it, honouring ctx.
	Admit(ctx context.Context, now time.Duration) (Ticket, Quota, error)
	// Done reports how an admitted request ended, with the Ticket its Admit
	// returned. now is the instant the request ended and latency how long
	// the call ran, from the end of its admission. For Released, latency is
	// the time since this policy's own Admit. Unless the policy declares
	// NeedsEnd, the Guard may skip the clock read for Success, Failure and
	// Ignored: now is then the instant of admission and latency is -1.
	Done(t Ticket, o Outcome, now, latency time.Duration)
	// Needs declares what the policy needs of the Guard beyond the above;
	// the Guard asks once, when it is built.
	Needs() Needs
}

// Needs is what a policy declares it needs of a Guard: a set of flags. The
// zero value needs nothing: the policy's Admit never blocks, and its Done has
// no use for the end instant of a call that was not Released.
type Needs uint8

const (
	// NeedsEnd: Done needs the instant each call ended and its latency (a
	// breaker on a rolling window, a concurrency limit that learns from
	// latency). A Guard none of whose policies needs it reads the clock once
	// per call instead of twice.
	NeedsEnd Needs = 1 << iota
	// Waits: Admit may block (a shaper waiting for its slot, a queue for a
	// concurrency slot). The Guard reads its clock again after such a policy
	// admits, so the policies after it decide at the instant the wait ended,
	// and the latency every policy hears is the call's own.
	Waits
	// NeedsResource: Admit or Done reads the call's resource (ResourceFrom),
	// as a breaker.Group keyed by resource does. The client adapters, which
	// name each outgoing call's resource (a gRPC method, a Transport's
	// host), put it in the call's context only for a Guard that has such a
	// policy, an observer or a fallback: elsewhere it would cost the call an
	// allocation for nothing.
	NeedsResource
)

// Quota is what a policy's Admit tells of its quota after a decision, and
// of when a rejected caller may try again: the fields of Decision that a
// policy fills in. A policy with no quota (a breaker, a load shedder)
// answers Quota{Limit: -1}.
type Quota struct {
	// Limit, Remaining and Reset are the policy's quota after this
	// decision, as in Decision; Limit is -1 where a quota has no meaning.
	Limit     int64
	Remaining int64
	Reset     time.Duration
	// RetryAfter is how long a rejected caller should wait; 0 on admission.
	RetryAfter time.Duration
}

// decision returns the Decision of the policy named policy that answered
// q, rejecting with cause when it is not nil.
func (q Quota) decision(policy string, cause error) Decision {
	return Decision{Allowed: cause == nil, Policy: policy, Limit: q.Limit,
		Remaining: q.Remaining, Reset: q.Reset, RetryAfter: q.RetryAfter, Cause: cause}
}

// Ticket carries per-call state from a policy's Admit to its Done without
// allocating: a generation, a slot, a cost. Its meaning is private to the
// policy that issued it.
type Ticket uint64

// Outcome is how an admitted call ended, as far as the policies are concerned.
type Outcome uint8

const (
	// Success: the call did its work.
	Success Outcome = iota
	// Failure: the call failed in a way that says something about the health
	// of what it called (an error, a 5xx, a gRPC Unavailable, a timeout).
	Failure
	// Ignored: the call ended in a way that says nothing about the dependency's
	// health: the caller cancelled, a client error (4xx), another sluice
	// policy's rejection. Breakers do not count it; a load shedder learns
	// only how long it held its slot, when that was long (see adaptive).
	Ignored
	// Released: the call never ran, because a policy further in the chain
	// rejected it. A policy gives back what its Admit took (a token, a
	// concurrency slot, a half-open probe), as if the request had not come.
	Released
)

// String returns "success", "failure", "ignored" or "released".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Ignored:
		return "ignored"
	case Released:
		return "released"
	}
	return "outcome(" + itoa(int64(o)) + ")"
}

// StateChange is a change of a policy's state: a breaker going from closed
// to open, a load shedder starting to shed, a degradation switch flipping.
type StateChange struct {
	// Policy is the Name of the policy whose state changed.
	Policy string
	// From and To are the states, as the policy names them ("closed", "open",
	// "half-open"; "normal", "shedding"; "off", "on").
	From, To string
	// At is the monotonic instant of the change.
	At time.Duration
}

// StateSource is implemented by policies whose state changes (breakers, load
// shedders). An [Observer] subscribes to those of its Guard's chain in
// Attach and unsubscribes in its detach function, as package
// observe/statelog does.
//
// Subscribe registers fn, called outside the policy's locks after each change,
// in the order the changes happened; the returned function removes it.
type StateSource interface {
	Subscribe(fn func(StateChange)) (unsubscribe func())
}

// Opener is implemented by the policies that a dependency can ask to hold
// off for a while: a breaker, held open for the Retry-After of an HTTP 503
// or 429, or the RetryInfo of a gRPC Unavailable or ResourceExhausted. The
// net/http Transport and the gRPC client interceptors call OpenFor on each
// policy of their Guard that implements it, with the request's context and
// the instant the answer arrived, on the Guard's clock, so that the hold
// lasts the whole delay asked, however long the call took; a custom policy
// can take part too.
type Opener interface {
	// OpenFor stops admitting, from the instant now and for at least d, the
	// calls that ctx selects: all of them for a breaker.Breaker, those of
	// ctx's resource for a breaker.Group. A d ≤ 0 asks nothing.
	OpenFor(ctx context.Context, now, d time.Duration)
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := v < 0
	if neg {
		v = -v
	}
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
