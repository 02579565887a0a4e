package redislimit

import (
	"errors"
	"time"
)

// SetLimit changes the limiter's numbers to limit cost units per window,
// window as Window reports it: for a GCRA or a token bucket, a burst of
// limit refilled at limit per window (a rate of limit/window); for a
// window, limit and the window's length (for NewSlidingWindow, divided
// into the same number of buckets). The numbers are validated, and
// rounded, as the constructor does: on an error nothing changes.
//
// The change takes effect with the next script call, which carries the
// numbers: the keys stay the same, so every instance sharing the limit
// must be given the same change. State in Redis is kept where the
// algorithm reads it the same way under the new numbers: a GCRA's or
// token bucket's theoretical arrival time, a window's count while the
// window's length is unchanged. The local share of WithLocalFallback
// starts afresh. A Limiter built by All decides its members' limits:
// change those, and All follows.
func (l *Limiter) SetLimit(limit int64, window time.Duration) error {
	if len(l.limits) != 1 || l.limits[0].remake == nil {
		return errors.New("redislimit: SetLimit on a Limiter built by All: set each limit on the Limiter given to All")
	}
	m := l.limits[0]
	p, err := m.remake(limit, window)
	if err != nil {
		return err
	}
	pm := p.limits[0]
	if loc := pm.local.Load(); loc != nil {
		m.local.Store(loc)
	}
	m.nums.Store(pm.nums.Load())
	if l.neg != nil {
		l.neg.clear() // rejections remembered under the old numbers
	}
	return nil
}
