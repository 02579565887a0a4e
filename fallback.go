package sluice

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/sluice-go/sluice/internal/isnil"
	"github.com/sluice-go/sluice/internal/timeouterr"
)

// Fallback answers in place of a call that a Guard's policy rejected or that
// failed. A Guard takes fallbacks with [WithFallback] as its outermost layer:
// they see the final error of a request (a rejection, a timeout, the
// protected call's own error) after every policy has counted it, so a breaker
// still counts the failure that a fallback hides from the caller.
//
// A fallback answers with a value of one type T (a [FallbackOf][T]), and
// each entry point applies the fallbacks whose answer it can give: [Execute]
// those of its T, the net/http and Echo middleware those answering an
// http.Handler, the gRPC unary interceptors those answering a message (any);
// [Guard.Do] keeps only the error of any of them. Package degrade builds
// Fallbacks declared by cause, by route, and stale answers.
type Fallback interface {
	// Declared returns the name of the declaration that answers err for the
	// request of ctx, and false when none does. It runs no answer.
	Declared(ctx context.Context, err error) (name string, ok bool)
	// Answer is called by [Guard.Do] with the non-nil error of a request. It
	// returns the error the caller gets: nil to swallow err, err itself to
	// decline, or another error. name names the declaration that answered
	// ("rate-limited", "stale", ...); it is "" when none is declared for err,
	// and out is then err.
	Answer(ctx context.Context, err error) (name string, out error)
}

// FallbackOf is a Fallback that answers with a value of type T.
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
// When a request is rejected or its call fails, the fallbacks that answer
// with the entry point's type are asked in order (see [Fallback]), and the
// first one with a declaration for the error answers: with a value, or by
// declining with an error, which then goes to the caller. One without a
// declaration for the error (a stale cache with nothing for the key) passes
// it on to the next. When none answers, the caller gets the error as it is;
// but when a fallback of another type declares an answer for it, that is a
// mistake in the Guard's declaration, reported as an error rather than
// skipped. Adapters refuse, when they are built, a Guard
// with fallbacks they cannot answer with. Panics of the call, and panics of a
// fallback, go on up the stack.
func WithFallback(fbs ...Fallback) Option {
	return func(g *Guard) error {
		for i, f := range fbs {
			if isnil.Of(f) {
				return errors.New("sluice: WithFallback: fallback " + itoa(int64(len(g.fallbacks)+i)) + " is nil")
			}
			if isnil.Unmade(f) {
				return fmt.Errorf("sluice: WithFallback: fallback %d is a zero %T: make it with its constructor", len(g.fallbacks)+i, f)
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

// fallbackList returns the Guard's fallbacks, in the order given to
// WithFallback: for adapters (through internal/guardhook), to check when
// they are built that they can answer with each, and to find the ones they
// feed (a stale cache).
func (g *Guard) fallbackList() []Fallback {
	if g == nil {
		return nil
	}
	return append([]Fallback(nil), g.fallbacks...)
}

// fallbackValue is the fallback layer of [Execute] for an error err of a
// call of g that returned v: the first of g's fallbacks of type T
// ([FallbackOf]) that declares an answer for err gives it. It returns that
// answer and nil when the fallback serves, and v with an error otherwise:
// the fallback's, when it declines; err itself when no fallback declares an
// answer. When none of type T declares one but a fallback of another type
// does, the error says so and wraps err. A nil g or err returns v and err.
func fallbackValue[T any](ctx context.Context, g *Guard, v T, err error) (T, error) {
	if g == nil || err == nil {
		return v, err
	}
	for _, f := range g.fallbacks {
		fv, ok := f.(FallbackOf[T])
		if !ok {
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
	for i, f := range g.fallbacks {
		if _, ok := f.(FallbackOf[T]); ok {
			continue
		}
		if name, ok := f.Declared(ctx, err); ok {
			return v, otherTypeError(i, f, name, reflect.TypeFor[T](), err)
		}
	}
	return v, err
}

// otherTypeError is the error of an entry point that answers with a typ
// for err, which fallback i, f, of another type, declares an answer for
// (named name): a mistake in the Guard's declaration, reported rather than
// skipped. It wraps err.
func otherTypeError(i int, f Fallback, name string, typ reflect.Type, err error) error {
	return &misdeclaredError{fmt.Errorf("sluice: fallback %d (%T) declares %q for this error but answers another type than %s; declare one answering %s: %w",
		i, f, name, typeName(typ), typeName(typ), err)}
}

// misdeclaredError is otherTypeError's error, which a layer over an entry
// point (degrade.Stale) tells from the call's own with
// guardhook.Misdeclared, so as not to hide it.
type misdeclaredError struct{ error }

func (e *misdeclaredError) Unwrap() error { return e.error }

// typeName names t, interfaces included ("http.Handler", "any").
func typeName(t reflect.Type) string {
	if t.Kind() == reflect.Interface && t.NumMethod() == 0 && t.Name() == "" {
		return "any"
	}
	return t.String()
}

func (g *Guard) served(ctx context.Context, name string, err error) {
	if g.obs != nil {
		g.obs.add(slotFallbacks + int(CauseOf(err)))
	}
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
// timeout error wraps it: a Guard's timeout wrapping an inner Guard's
// rejection is not a rejection by the Guard.
func rejectionOf(err error) *rejectedError {
	for err != nil {
		switch e := err.(type) {
		case *rejectedError:
			return e
		case *timeouterr.Error:
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
