package sluice

import (
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/monoclock"
)

// Clock reads monotonic time as a duration since an arbitrary fixed origin.
// Policies compare instants from one Clock only. Its readings must not go
// backwards (time.Now().UnixNano() does, when the wall clock is set): the
// rate limiters then never admit extra, but a breaker opened, or a load
// guard's window begun, before a step back keeps its state until the clock
// catches up.
type Clock interface {
	Now() time.Duration
}

type systemClock struct{}

func (systemClock) Now() time.Duration { return monoclock.Now() }

// SystemClock is the process's monotonic clock, shared by every Guard and
// policy that is given no other. Its origin is the start of the process, so
// instants from it can be 0 at start-up; policies never treat 0 as "unset".
var SystemClock Clock = systemClock{}

// ManualClock is a Clock that moves only when told: for tests and examples
// that step through time. Its zero value reads 0. It is safe for concurrent
// use.
type ManualClock struct{ now atomic.Int64 }

// NewManualClock returns a ManualClock that reads start.
func NewManualClock(start time.Duration) *ManualClock {
	c := &ManualClock{}
	c.now.Store(int64(start))
	return c
}

// Now returns the clock's reading.
func (c *ManualClock) Now() time.Duration { return time.Duration(c.now.Load()) }

// Advance moves the clock forward by d (backward if d is negative: for a
// test of what a clock stepping back does; see Clock) and returns the new
// reading.
func (c *ManualClock) Advance(d time.Duration) time.Duration {
	return time.Duration(c.now.Add(int64(d)))
}

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Duration) { c.now.Store(int64(t)) }
