// Package policywindow tells the adapters the window of a rate limit, the w
// parameter of the RateLimit-Policy header field, without a public method on
// every limiter: each package of limiters registers, when it is
// initialised, a function that knows its own types.
package policywindow

import (
	"sync/atomic"
	"time"
)

// finders are the registered functions. They are appended to only by the
// init functions of packages, which run one at a time before main.
var finders []func(p any) time.Duration

// Register adds f, which returns the window of the policies it knows and 0
// for any other. Call it from an init function.
func Register(f func(p any) time.Duration) { finders = append(finders, f) }

// Of returns the window of p as the first registered function that knows p
// reports it: a fixed or sliding window's length, a bucket's time to refill
// its burst. It returns 0 when none knows p.
func Of(p any) time.Duration {
	for _, f := range finders {
		if w := f(p); w > 0 {
			return w
		}
	}
	return 0
}

// epoch counts the calls of Changed.
var epoch atomic.Uint64

// Changed notes that a policy's window may have changed (its SetLimit ran):
// whoever keeps a window read with Of reads it again when Epoch moves. Call
// it once the new window is what Of reports.
func Changed() { epoch.Add(1) }

// Epoch returns how many times Changed was called: read it before the
// windows it stands for.
func Epoch() uint64 { return epoch.Load() }
