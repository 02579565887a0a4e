// Package shedhook reaches, for package rules and the Guard, what package
// adaptive does not export.
package shedhook

import "time"

// Carry makes the *adaptive.Shedder to count the calls in flight of the
// *adaptive.Shedder from, which it takes the place of (a live rules reload
// that made a bulkhead anew): until they end, they hold to's slots as its
// own calls do, and their ends free them. Set by package adaptive.
var Carry func(from, to any)

// CutShort ends, for the Guard, a call of policy p (a sluice.Policy) whose
// latency a deadline cut short: the call's end is latency at least, not
// what the service took. It reports whether p took it (p is an
// *adaptive.Shedder); otherwise the Guard calls p's Done as for any end.
// t and o are the call's sluice.Ticket and sluice.Outcome. Set by package
// adaptive.
var CutShort func(p any, t uint64, o uint8, now, latency time.Duration) bool

// CutShortWithin is CutShort for a policy p that passes its calls on to
// others (a *ratelimit.Keyed): it reports whether p took the end, which it
// passes on through Cut. Set by package ratelimit.
var CutShortWithin func(p any, t uint64, o uint8, now, latency time.Duration) bool

// Cut ends a call of p cut short by a deadline through CutShort or
// CutShortWithin, and reports whether either took it; when neither does,
// the caller ends it with p's Done.
func Cut(p any, t uint64, o uint8, now, latency time.Duration) bool {
	return CutShort != nil && CutShort(p, t, o, now, latency) ||
		CutShortWithin != nil && CutShortWithin(p, t, o, now, latency)
}
