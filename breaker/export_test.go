package breaker

import (
	"context"
	"time"

	"github.com/sluice-go/sluice"
)

// Allow begins a call through the Guard of the breaker alone that Execute
// runs its calls through, for the tests that end calls by hand.
func (b *Breaker) Allow() (sluice.Call, error) { return b.env.g.Begin(context.Background()) }

// Allow is Breaker.Allow for the throttle.
func (a *Adaptive) Allow() (sluice.Call, error) { return a.env.g.Begin(context.Background()) }

// Requests returns the requests and accepts counted in the window ending at
// now.
func (a *Adaptive) Requests(now time.Duration) (requests, accepts int64) {
	t := a.win.readAt(now)
	return max(t.total, 0), max(t.lo, 0)
}
