package degrade

import "time"

// Observe is Check with the reading v at the instant now, for the tests
// that step through readings.
func (a *Auto) Observe(now time.Duration, v float64) bool { return a.observe(now, v) }
