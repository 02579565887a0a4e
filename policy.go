package sluice

import (
	"context"
	"math"
	"reflect"
	"time"
)

// Decision is what every policy answers for one request, and what the
// adapters turn into response headers.
//
// The zero Decision rejects with no reason given; policies always fill it in.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Policy names the policy that decided, as its Name returns it:
	// "ratelimit/per-ip", "breaker/payments".
	Policy string
	// Limit is the quota of the window or bucket, in cost units; -1 where a
	// quota has no meaning (a breaker, a load guard, a concurrency limit).
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

// Policy is one link of a Guard's chain.
//
// A Guard calls Admit once per request with the monotonic instant it read when
// the request arrived, and, for every Admit that allowed, Done exactly once
// when the request has ended, with the Ticket that Admit returned, the outcome,
// the instant the request ended and its latency: how long the call itself ran,
// from the end of its admission to its end. A policy never reads the clock
// itself on this path, except a policy that implements UntimedDone.
//
// Implementations must be safe for concurrent use. A policy may block in Admit
// (a shaper waiting for its slot, a queue for a concurrency slot); it must then
// honour ctx, and implement Waiter.
type Policy interface {
	// Name identifies the policy in decisions, errors and observers.
	Name() string
	// Admit decides on one request at the monotonic instant now.
	Admit(ctx context.Context, now time.Duration) (Decision, Ticket)
	// Done reports how an admitted request ended. It is called exactly once for
	// every Admit that allowed, and never for one that rejected. For Released,
	// latency is the time since this policy's own Admit, so now - latency is
	// the instant Admit was given.
	Done(t Ticket, o Outcome, now, latency time.Duration)
}

// Unread is the end instant a Guard hands to Done when it did not read the
// clock at the end of a call: see UntimedDone.
const Unread = time.Duration(math.MinInt64)

// UntimedDone is implemented by a policy whose Done has no use for the end
// instant or the latency of a call that ended in Success, Failure or
// Ignored: a rate limiter, which uses them only to give back what a Released
// request took; a breaker that counts outcomes in a count window and has no
// slow-call strategy; a bulkhead, whose limit no latency moves. When every
// policy of a Guard on SystemClock is one, the
// Guard reads the clock once per call instead of twice: Done then gets
// Unread as now and 0 as latency for those outcomes. Released always comes
// with the instant read. A policy that needs the time after all, rarely (a
// breaker that trips at that outcome), reads SystemClock itself.
//
// UntimedOf returns the receiver itself when it can do without them, and nil
// when it cannot (a breaker on a rolling window, or on a clock of its own).
// A type that embeds such a policy and has a Done of its own inherits
// UntimedOf; [IsUntimed] tells the two apart as [FastFormOf] does.
type UntimedDone interface {
	UntimedOf() Policy
}

// IsUntimed reports whether p's own Done can do without the end instant and
// the latency (see UntimedDone): p's UntimedOf returns a value of p's own
// type.
func IsUntimed(p Policy) bool {
	u, ok := p.(UntimedDone)
	if !ok {
		return false
	}
	o := u.UntimedOf()
	return o != nil && reflect.TypeOf(o) == reflect.TypeOf(p)
}

// FastPolicy is a Policy that also admits in a form whose answer fits in
// registers. Admit returns a Decision of nine machine words, and the caller
// of an interface method receives it through memory: about 14ns a call on
// amd64, more than the work of most policies. A Guard calls AdmitFast in
// Admit's place wherever a policy offers it. Every limiter of the ratelimit
// package that does not wait and its Keyed, the policies of the breaker
// package and its gobreaker adapter, the adaptive package's Guard and
// ConcurrencyLimit, and the degrade package's Shed implement it.
//
// AdmitFast decides exactly as Admit would, and the two must not be told
// apart: an admission returns its Ticket, its Quota and a nil error, and
// stands for the Decision {Allowed: true, Policy: Name(), Limit, Remaining,
// Reset}; a rejection returns a *RejectedError carrying the Decision Admit
// would have returned (the Ticket is then unused, and Done is not called).
// [FastAnswer] turns a Decision into this answer, so a policy can serve both
// forms from one decision.
//
// A type that embeds a FastPolicy inherits its AdmitFast, and may define an
// Admit of its own that the inherited AdmitFast would bypass. FastOf tells
// them apart: it returns the policy whose AdmitFast it is, the receiver
// itself, and [FastFormOf] takes the fast form only of a policy for which
// FastOf returns a value of the policy's own type.
type FastPolicy interface {
	Policy
	AdmitFast(ctx context.Context, now time.Duration) (Ticket, Quota, *RejectedError)
	FastOf() Policy
}

// FastFormOf returns p's own fast form, or nil when it has none: when p is
// not a FastPolicy, or when it inherits AdmitFast from a policy it embeds. A
// Guard asks each of its policies once, when it is built.
func FastFormOf(p Policy) FastPolicy {
	f, ok := p.(FastPolicy)
	if !ok || reflect.TypeOf(f.FastOf()) != reflect.TypeOf(p) {
		return nil
	}
	return f
}

// Quota is what an admitted request leaves of a policy's quota: the Limit,
// Remaining and Reset of its Decision. Limit is -1 where a quota has no
// meaning.
type Quota struct {
	Limit     int64
	Remaining int64
	Reset     time.Duration
}

// FastAnswer returns AdmitFast's answer for the Decision *d and the ticket t
// that Admit would return.
func FastAnswer(d *Decision, t Ticket) (Ticket, Quota, *RejectedError) {
	if !d.Allowed {
		return 0, Quota{}, &RejectedError{Decision: *d}
	}
	return t, Quota{Limit: d.Limit, Remaining: d.Remaining, Reset: d.Reset}, nil
}

// Decision returns the Decision of an admission by the policy named policy
// that left quota q.
func (q Quota) Decision(policy string) Decision {
	return Decision{Allowed: true, Policy: policy, Limit: q.Limit, Remaining: q.Remaining, Reset: q.Reset}
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
	// policy's rejection. Breakers and load guards do not count it.
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
// to open, a load guard starting to shed, a degradation switch flipping.
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
// guards). A Guard built with [OnStateChange] subscribes to every policy of its
// chain that implements it, and unsubscribes on Close.
//
// Subscribe registers fn, called outside the policy's locks after each change,
// in the order the changes happened; the returned function removes it.
type StateSource interface {
	Subscribe(fn func(StateChange)) (unsubscribe func())
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
