package degrade

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/timeouterr"
)

// Func answers in place of a call that ended with err. It returns the answer
// and nil to serve it, or an error (err itself to decline) that goes to the
// caller instead.
type Func[T any] func(ctx context.Context, err error) (T, error)

// Value returns a Func that answers v to every error.
func Value[T any](v T) Func[T] {
	return func(context.Context, error) (T, error) { return v, nil }
}

// kind is the slot a Rule fills, from the most specific to the least: one per
// sluice.Cause, then any rejection, then any error.
type kind uint8

const (
	kindRejected = kind(sluice.CauseTimeout) + 1 + iota
	kindError
	numKinds
)

// Rule declares one fallback: the errors it answers and its Func. Make one
// with OnRateLimited, OnCircuitOpen, OnOverloaded, OnConcurrencyLimited,
// OnTimeout, OnRejected or OnError. The zero Rule is invalid.
type Rule[T any] struct {
	kind kind
	name string
	fn   Func[T]
}

// Named returns r under name: the name an OnFallback observer sees. The
// default is the cause ("rate-limited", "circuit-open", "overloaded",
// "concurrency-limited", "timeout"), "rejected" or "error".
func (r Rule[T]) Named(name string) Rule[T] {
	r.name = name
	return r
}

func causeRule[T any](c sluice.Cause, fn Func[T]) Rule[T] {
	return Rule[T]{kind: kind(c), name: c.String(), fn: fn}
}

// OnRateLimited answers rejections by a rate limit (sluice.ErrRateLimited).
func OnRateLimited[T any](fn Func[T]) Rule[T] { return causeRule(sluice.CauseRateLimited, fn) }

// OnCircuitOpen answers rejections by an open circuit breaker
// (sluice.ErrCircuitOpen).
func OnCircuitOpen[T any](fn Func[T]) Rule[T] { return causeRule(sluice.CauseCircuitOpen, fn) }

// OnOverloaded answers rejections by the system-load guard
// (sluice.ErrOverloaded).
func OnOverloaded[T any](fn Func[T]) Rule[T] { return causeRule(sluice.CauseOverloaded, fn) }

// OnConcurrencyLimited answers rejections by a concurrency limit
// (sluice.ErrConcurrencyLimited).
func OnConcurrencyLimited[T any](fn Func[T]) Rule[T] {
	return causeRule(sluice.CauseConcurrencyLimited, fn)
}

// OnTimeout answers errors matching sluice.ErrTimeout: a call that ran past
// the Guard's timeout (sluice.WithTimeout), or a policy's wait that timed
// out.
func OnTimeout[T any](fn Func[T]) Rule[T] { return causeRule(sluice.CauseTimeout, fn) }

// OnRejected answers every rejection (sluice.ErrRejected) that no rule of
// its cause answers. A Guard's timeout (sluice.ErrTimeout) is not one, even
// when the call was waiting in an inner Guard that then rejected it.
func OnRejected[T any](fn Func[T]) Rule[T] {
	return Rule[T]{kind: kindRejected, name: "rejected", fn: fn}
}

// OnError answers every error that no more specific rule answers: the
// call's own failures, and the caller's cancellation or expired deadline.
func OnError[T any](fn Func[T]) Rule[T] {
	return Rule[T]{kind: kindError, name: "error", fn: fn}
}

// Fallbacks is a set of fallbacks declared by cause, for answers of type T.
// It is a sluice.FallbackOf[T]: give it to a Guard with sluice.WithFallback,
// and sluice.Execute[T] returns its answers; Guard.Do keeps only their
// errors. The net/http and Echo middleware serve the answers of a
// Fallbacks[http.Handler]; the gRPC unary interceptors those of a
// Fallbacks[any].
//
// For an error, the most specific rule answers: the rule of its cause
// (sluice.CauseOf), then OnRejected for a rejection, then OnError. An error
// no rule answers goes to the caller as it is, or to the Guard's next
// fallback. A Fallbacks made by NewRoutes picks, for each request, the
// Fallbacks of its route. A Fallbacks is immutable and safe for concurrent
// use.
type Fallbacks[T any] struct {
	rules [numKinds]Rule[T]

	// routed: made by NewRoutes, which sets routes and def; rules is empty.
	routed bool
	routes map[string]*Fallbacks[T]
	def    *Fallbacks[T]
}

// New returns the Fallbacks declared by rules. It fails when there is no
// rule, when a rule is the zero Rule or has a nil Func, or when two rules
// answer the same errors.
func New[T any](rules ...Rule[T]) (*Fallbacks[T], error) {
	if len(rules) == 0 {
		return nil, errors.New("degrade: New: no rule")
	}
	f := &Fallbacks[T]{}
	for i, r := range rules {
		if r.kind == 0 || r.kind >= numKinds {
			return nil, fmt.Errorf("degrade: New: rule %d is not made by an On function", i)
		}
		if r.fn == nil {
			return nil, fmt.Errorf("degrade: New: rule %d (%s) has a nil function", i, r.name)
		}
		if f.rules[r.kind].fn != nil {
			return nil, fmt.Errorf("degrade: New: rule %d (%s) answers the same errors as %q", i, r.name, f.rules[r.kind].name)
		}
		if r.name == "" {
			return nil, fmt.Errorf("degrade: New: rule %d has an empty name", i)
		}
		f.rules[r.kind] = r
	}
	return f, nil
}

// rule returns the most specific rule for err, or nil.
func (f *Fallbacks[T]) rule(err error) *Rule[T] {
	if c := sluice.CauseOf(err); c != sluice.CauseNone && f.rules[c].fn != nil {
		return &f.rules[c]
	}
	// A timeout wrapping an inner Guard's rejection is this Guard's timeout,
	// not a rejection by it.
	if f.rules[kindRejected].fn != nil && errors.Is(err, sluice.ErrRejected) && !errors.As(err, new(*timeouterr.Error)) {
		return &f.rules[kindRejected]
	}
	if f.rules[kindError].fn != nil {
		return &f.rules[kindError]
	}
	return nil
}

// Declared implements sluice.Fallback: it returns the name of the rule that
// answers err, and false when no rule does; ctx selects the route of a
// Fallbacks made by NewRoutes.
func (f *Fallbacks[T]) Declared(ctx context.Context, err error) (string, bool) {
	if f.routed {
		if f = f.pick(ctx); f == nil {
			return "", false
		}
		return f.Declared(ctx, err)
	}
	if err == nil {
		return "", false
	}
	if r := f.rule(err); r != nil {
		return r.name, true
	}
	return "", false
}

// AnswerValue implements sluice.FallbackOf: it answers err with its most
// specific rule, and names it; name is "" when no rule answers err.
func (f *Fallbacks[T]) AnswerValue(ctx context.Context, err error) (v T, name string, out error) {
	if f.routed {
		if f = f.pick(ctx); f == nil {
			return v, "", err
		}
		return f.AnswerValue(ctx, err)
	}
	if err == nil {
		return v, "", nil
	}
	r := f.rule(err)
	if r == nil {
		return v, "", err
	}
	v, out = r.fn(ctx, err)
	return v, r.name, out
}

// Answer implements sluice.Fallback, for Guard.Do: it is AnswerValue
// without the value.
func (f *Fallbacks[T]) Answer(ctx context.Context, err error) (name string, out error) {
	_, name, out = f.AnswerValue(ctx, err)
	return name, out
}
