package redislimit

import (
	"errors"
	"time"

	"github.com/sluice-go/sluice/internal/policywindow"
)

// SetLimit changes the limiter's numbers to limit cost units per window:
// for a GCRA or a token bucket, a burst of limit refilled in window (a
// rate of limit per window, the window of its RateLimit-Policy header);
// for a window, limit and the window's length (for NewSlidingWindow,
// divided into the same number of buckets). The numbers are validated, and
// rounded, as the constructor does: on an error nothing changes.
//
// The change takes effect with the next script call, which carries the
// numbers: the keys stay the same, so every instance sharing the limit
// must be given the same change (an instance started with the new numbers
// shares the same keys). State in Redis is kept as the algorithm stores
// it: a GCRA's instant at which it is full again and a token bucket's
// whole tokens it lacks (so a full bucket is full at its new size, and one
// in debt repays the same, as ratelimit.TokenBucket's SetLimit keeps what
// the bucket lacks; but the time since its last whole token counts at the
// new rate, so a change to a much faster one may refill it at once, up to
// its burst), a window's count, whose length cannot change: a window
// limiter refuses a new one, for a new Limiter to take it. A token
// bucket's key expires when the bucket would be full at the rate in force
// when it was last written: after a SetLimit that slows the rate, a bucket
// not written to since reads full once it expires, as if it had refilled
// at the old rate (one burst more at most, once a key). The local share
// of WithLocalFallback starts afresh. A Limiter built by All of several
// limits refuses: change the members, and All follows.
func (l *Limiter) SetLimit(limit int64, window time.Duration) error {
	defer policywindow.Changed() // once the new window is in place
	if len(l.limits) != 1 || l.limits[0].remake == nil {
		return errors.New("redislimit: SetLimit on a Limiter of several limits (All): set each on the Limiter given to All")
	}
	m := l.limits[0]
	p, err := m.remake(limit, window)
	if err != nil {
		return err
	}
	pm := p.limits[0]
	if a := m.algArg.(string)[0]; (a == 'f' || a == 's' || a == 'b') && pm.nums.Load().periodArg != m.nums.Load().periodArg {
		// A window's state in Redis is an index counted in its length,
		// under keys named for it: read at another length, the index is
		// taken for one far ahead, and the key is held for decades.
		return errors.New("redislimit: SetLimit cannot change a window's length, which its state in Redis is counted in: build a new Limiter (its keys start afresh)")
	}
	if loc := pm.local.Load(); loc != nil {
		m.local.Store(loc)
	}
	m.nums.Store(pm.nums.Load())
	if l.neg != nil {
		l.neg.clear() // rejections remembered under the old numbers
	}
	return nil
}
