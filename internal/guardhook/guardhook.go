// Package guardhook lets the adapters and observers of this module reach
// parts of a sluice.Guard that its public API does not show. The sluice
// package sets the functions when it is initialised, before any caller can
// hold a Guard.
package guardhook

import (
	"context"
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
