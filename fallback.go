package sluice

import (
	"context"
	"errors"
	"fmt"
)

// Fallback answers in place of a call that a Guard's policy rejected or that
// failed. A Guard takes fallbacks with [WithFallback] as its outermost layer:
// they see the final error of a request (a *RejectedError, a timeout, the
// protected call's own error) after every policy has counted it, so a breaker
// still counts the failure that a fallback hides from the caller.
//
// Package degrade builds Fallbacks declared by cause, and stale answers.
type Fallback interface {
	// Answer is called by [Guard.Do] and [Guard.ApplyFallback] with the
	// non-nil error of a request. It returns the error the caller gets: nil to
	// swallow err, err itself to decline, or another error. name names the
	// declaration that answered ("rate-limited", "stale", ...); it is ""
	// when none is declared for err, and out is then err.
	Answer(ctx context.Context, err error) (name string, out error)
}

// FallbackOf is a Fallback that also answers with a value of type T, for
// [Execute] of that type.
type FallbackOf[T any] interface {
	Fallback
	// AnswerValue is Answer with a value: when out is nil, v is the answer
	// the caller gets instead of the call's.
	AnswerValue(ctx context.Context, err error) (v T, name string, out error)
}

// FallbackEvent tells an observer registered with [OnFallback] that a
// fallback answered a request with success instead of its error.
type FallbackEvent struct {
	// Fallback names the declaration that answered, as the Fallback named it:
	// "rate-limited", "circuit-open", "timeout", "error", "stale", or a name
	// given by the user.
	Fallback string
	// Cause is why: the cause of the replaced error, CauseNone when it was
	// another failure of the call.
	Cause Cause
	// Policy names the policy that rejected the request; "" when the call ran
	// and failed.
	Policy string
	// Err is the error the fallback replaced.
	Err error
}

// WithFallback adds fallbacks as the Guard's outermost layer; it may be given
// more than once, and the fallbacks keep the order given.
//
// When a request is rejected or its call fails, the fallbacks are asked in
// order, and the first one with a declaration for the error answers: with a
// value, or by declining with an error, which then goes to the caller. One
// without a declaration for the error (a stale cache with nothing for the
// key) passes it on to the next. [Execute] asks only the fallbacks that
// answer with its type T (a [FallbackOf][T]); [Guard.Do] asks all of them and
// keeps only the error. When none answers, the caller gets the error as it
// is. Panics of the call, and panics of a fallback, go on up the stack.
func WithFallback(fbs ...Fallback) Option {
	return func(g *Guard) error {
		for i, f := range fbs {
			if isNil(f) {
				return errors.New("sluice: WithFallback: fallback " + itoa(int64(len(g.fallbacks)+i)) + " is nil")
			}
		}
		g.fallbacks = append(g.fallbacks, fbs...)
		return nil
	}
}

// OnFallback registers fn, called each time one of the Guard's fallbacks
// answers a request with success instead of its error (not when a fallback
// declines). It runs on the request's goroutine, outside every lock; keep it
// short.
func OnFallback(fn func(ctx context.Context, ev FallbackEvent)) Option {
	return func(g *Guard) error {
		if fn == nil {
			return errors.New("sluice: OnFallback: nil function")
		}
		g.onFallback = append(g.onFallback, fn)
		return nil
	}
}

// applyFallback is the fallback layer of Do; err is not nil.
func (g *Guard) applyFallback(ctx context.Context, err error) error {
	for _, f := range g.fallbacks {
		name, out := f.Answer(ctx, err)
		if name == "" {
			continue
		}
		if out == nil {
			g.served(ctx, name, err)
		}
		return out
	}
	return err
}

// fallbackValue is the fallback layer of Execute; err is not nil. v is the
// call's own value, returned with err when no fallback answers.
func fallbackValue[T any](ctx context.Context, g *Guard, v T, err error) (T, error) {
	for _, f := range g.fallbacks {
		fv, ok := f.(FallbackOf[T])
		if !ok {
			if name, _ := f.Answer(ctx, err); name != "" {
				// It has an answer for err, of another type: a mistake
				// in the Guard's declaration, reported rather than
				// skipped.
				return v, fmt.Errorf("sluice: Execute[%T]: fallback %q answers another type: %w", v, name, err)
			}
			continue
		}
		w, name, out := fv.AnswerValue(ctx, err)
		if name == "" {
			continue
		}
		if out != nil {
			return v, out // declined: the call's own value stands
		}
		g.served(ctx, name, err)
		return w, nil
	}
	return v, err
}

func (g *Guard) served(ctx context.Context, name string, err error) {
	if len(g.onFallback) == 0 {
		return
	}
	ev := fallbackEvent(name, err)
	for _, fn := range g.onFallback {
		fn(ctx, ev)
	}
}

// fallbackEvent returns the event of the fallback named name answering
// in place of err: its Cause is CauseOf(err), and its Policy the name of
// the policy that rejected, when err is a rejection (not a timeout wrapping
// an inner Guard's rejection).
func fallbackEvent(name string, err error) FallbackEvent {
	ev := FallbackEvent{Fallback: name, Cause: CauseOf(err), Err: err}
	if re := rejectionOf(err); re != nil {
		ev.Policy = re.d.Policy
	}
	return ev
}

// RejectionOf returns the Decision of the sluice rejection that err is or
// wraps, and false when there is none. A Guard's timeout wrapping an inner
// Guard's rejection is a timeout, not a rejection: false.
func RejectionOf(err error) (Decision, bool) {
	if re := rejectionOf(err); re != nil {
		return re.decision(), true
	}
	return Decision{}, false
}

// rejectionOf returns the RejectedError that err is or wraps, unless a
// TimeoutError wraps it: a Guard's timeout wrapping an inner Guard's
// rejection is not a rejection by the Guard.
func rejectionOf(err error) *rejectedError {
	for err != nil {
		switch e := err.(type) {
		case *rejectedError:
			return e
		case *TimeoutError:
			return nil
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				if re := rejectionOf(x); re != nil {
					return re
				}
			}
			return nil
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		default:
			return nil
		}
	}
	return nil
}
