// Package guardhook lets the adapters and observers of this module reach
// parts of a sluice.Guard that its public API does not show. The sluice
// package sets the functions when it is initialised, before any caller can
// hold a Guard.
package guardhook

import (
	"context"
	"reflect"
	"time"
)

// RetryDelay is g's retry decision for adapters that run their own
// attempts; g is a *sluice.Guard, possibly nil. attempts is how many the
// call has made, began when the last of them started (the zero Time when
// unknown), and atLeast the delay its peer asked for (0 when none). It
// returns how long to wait before the next attempt, and true; or false when
// g declares no retries, the attempts are spent, atLeast passes the Retry's
// MaxBackoff, the next attempt, were it to take as long as the last, could
// not end before ctx's deadline, or g's retry budget is spent (counted in
// Stats.BudgetRefusals). A true answer spends one retry of the budget. The
// caller decides whether the failure is worth a retry: this asks nothing of
// the error. With attempts 0 it only tells whether g declares retries,
// spending nothing: 0 and true if it does.
var RetryDelay func(g any, ctx context.Context, attempts int, began time.Time, atLeast time.Duration) (time.Duration, bool)

// Fallbacks returns a copy of g's fallbacks as a []sluice.Fallback, in the
// order given to WithFallback; g is a *sluice.Guard, possibly nil.
var Fallbacks func(g any) any

// FallbackLayer runs g's fallback layer for err, the non-nil error of a
// call of g (a *sluice.Guard, not nil), for an adapter that answers with
// one type: is reports whether a fallback (a sluice.Fallback) answers with
// it; ask asks one fallback for its answer to err: ok false when it does
// not answer with the type, else the name of its declaration ("" when none)
// and out, nil when it served (ask then keeps the answer) or the error it
// declined with; typ returns the type, which the error about a fallback of
// another type names. It returns true when a fallback served; else the
// error the caller gets: the declining fallback's, one saying that a
// fallback of another type declares an answer, or err. Package fallbackof
// wraps it for a type parameter.
var FallbackLayer func(g any, ctx context.Context, err error, is func(f any) bool, ask func(f any) (ok bool, name string, out error), typ func() reflect.Type) (bool, error)
