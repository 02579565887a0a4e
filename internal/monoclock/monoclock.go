// Package monoclock reads the process's monotonic clock as a duration, for
// the packages of the module that default to the system clock, and gives
// tests a clock whose origin is the instant they make it.
package monoclock

import "time"

// start is the origin of Now. Its monotonic reading makes time.Since one
// read of the runtime's monotonic clock, about half the cost of time.Now.
var start = time.Now()

// Now returns the monotonic time since the process started. It is what
// sluice.SystemClock reads; callers in the module use it directly, since a
// call through the Clock interface is not inlined.
func Now() time.Duration { return time.Since(start) }

// Clock is a clock whose origin is the instant it was made. Inside a
// testing/synctest bubble, make one in the bubble: it then follows the
// bubble's fake time.
type Clock struct{ origin time.Time }

// New returns a Clock whose origin is now.
func New() *Clock { return &Clock{origin: time.Now()} }

// Now returns the monotonic time since the clock was made.
func (c *Clock) Now() time.Duration { return time.Since(c.origin) }
