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

// Detach lets the observers of g (a *sluice.Guard) go, as its Close does,
// but closes none of its policies.
var Detach func(g any)

// Retire marks g (a *sluice.Guard) as serving no new call: a rules reload
// put its successor in force. Its Close does too. Retired reports it: until
// then an observer that let g's observers go (Detach) still counts what g
// serves.
var (
	Retire  func(g any)
	Retired func(g any) bool
)

// Refused reports whether g (a *sluice.Guard) is one New failed to make (an
// observer refused it): it never served, and its observers, let go of,
// have nothing of it to report or carry.
var Refused func(g any) bool

// Closed reports whether g (a *sluice.Guard) was closed.
var Closed func(g any) bool

// Grace is how long a Guard a reload replaced (retired, not closed) is
// read on once no call of it is in flight: a request that found it in
// force before the reload may begin its call after, and an observer that
// stopped reading it would lose that call.
var Grace = time.Minute

// Settled reports whether g counts no more calls, for an observer that
// reads it on after its successor took its place: retired with nothing in
// flight, and closed, or so since idle for Grace. idle holds the instant it
// was first found so (zero until then, and again when a call comes);
// Settled keeps it.
func Settled(g any, idle *time.Time, now time.Time) bool {
	if Refused(g) {
		return true // it never served
	}
	if !Retired(g) || InFlight(g) != 0 {
		*idle = time.Time{}
		return false
	}
	if Closed(g) {
		return true
	}
	if idle.IsZero() {
		*idle = now
	}
	return now.Sub(*idle) >= Grace
}

// Waits reports whether a policy of g (a *sluice.Guard, possibly nil) may
// wait in its Admit.
var Waits func(g any) bool

// RetryAttempts returns the most attempts a call of g (a *sluice.Guard,
// possibly nil) makes: its Retry's Attempts, 1 when it declares none.
var RetryAttempts func(g any) int

// Fallbacks returns a copy of g's fallbacks as a []sluice.Fallback, in the
// order given to WithFallback; g is a *sluice.Guard, possibly nil.
var Fallbacks func(g any) any

// NumFallbacks returns how many fallbacks g (a *sluice.Guard, not nil) has;
// FallbackAt returns the one at index i, a sluice.Fallback, in the order
// given to WithFallback. Unlike Fallbacks, they copy nothing, for the
// adapters' fallback layer (package fallbackof) on the request path.
var (
	NumFallbacks func(g any) int
	FallbackAt   func(g any, i int) any
)

// ReadsResource reports whether g (a *sluice.Guard, possibly nil) reads
// its calls' resource: a policy of it declares sluice.NeedsResource, or it
// has an observer or a fallback. The client adapters name an outgoing
// call's resource in its context only for such a Guard.
var ReadsResource func(g any) bool

// Timed reports whether g (a *sluice.Guard, possibly nil) has a call
// timeout: only then is a Call's Context another than the one it was begun
// with.
var Timed func(g any) bool

// Classify returns the sluice.Outcome that call (a *sluice.Call its Guard
// admitted, not yet ended) counts err as, by its Guard's Classifier, for
// adapters that report an attempt themselves: as the Call's end does, err
// is first a timeout when the Guard's own deadline has passed.
var Classify func(call any, err error) uint8

// Now reads the clock of g (a *sluice.Guard, not nil): the instant an
// answer arrived, for Opener.OpenFor.
var Now func(g any) time.Duration

// Served tells g (a *sluice.Guard, not nil) that its fallback named name
// answered in place of err: its counters and OnFallback observers hear of
// it, as when Execute's fallback serves.
var Served func(g any, ctx context.Context, name string, err error)

// OtherTypeError is the error of an entry point that answers with a typ
// for err when g's fallback i, f, of another type, declares an answer for
// it named name: the Guard's declaration is mistaken. It wraps err.
var OtherTypeError func(i int, f any, name string, typ reflect.Type, err error) error

// Carry gives the Guard to the shadow modes and the counters (Stats) of
// the Guard from, both *sluice.Guard with the same chain of policies: a
// Guard made again from another's options, in its place, takes the modes
// set on it since, and counts on from its counts (those of the calls that
// have ended: the others end in from).
var Carry func(from, to any)

// InFlight returns how many calls g (a *sluice.Guard, observed) admitted
// that have not ended: what its Stats tell only through its policies.
var InFlight func(g any) uint64

// Carried returns what the Stats of g (a *sluice.Guard) held when Carry
// gave it another's counts, a *sluice.Stats, or nil: an observer that
// carries a Guard's counts on to its successor of the same name itself
// (otelmetrics) leaves them out, or it counts them twice.
var Carried func(g any) any

// Shadows returns the shadow modes of g (a *sluice.Guard): whether the
// whole Guard is in shadow mode, and the names of the policies in shadow
// mode by name.
var Shadows func(g any) (all bool, names []string)

// RejectedBy reports whether err is, or wraps, a rejection by a policy of g
// (a *sluice.Guard): one whose windows a route of g can name.
var RejectedBy func(err error, g any) bool

// Misdeclared reports whether err is, or wraps, an error OtherTypeError
// made, or the one an entry point returns for the same mistake.
var Misdeclared func(err error) bool
