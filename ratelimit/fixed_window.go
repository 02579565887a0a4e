package ratelimit

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policywindow"
)

// FixedWindow admits at most limit cost units in each window of time
// [k·window, (k+1)·window), counted from instant 0 of the Guard's clock.
//
// It is the simplest limiter and the cheapest: one atomic word holds the
// window's index and what it has used, updated with compare-and-swap. Its
// known weakness is the window boundary: up to 2·limit can pass within a
// short time around the end of one window and the start of the next (see
// SlidingWindow and SlidingLog for the remedies).
//
// An instant older than the window the limiter has already moved to (a clock
// stepping backwards, or a late caller) is counted against the newer window,
// so it never admits extra. Make one with NewFixedWindow; the zero value is
// not usable.
type FixedWindow struct {
	cfg  atomic.Pointer[windowConfig]
	mu   sync.Mutex // serialises SetLimit
	name string
}

// windowConfig is one configuration of a FixedWindow with its own state
// word; SetLimit moves the state to a new one and freezes the old word, so
// a decision racing with the change retries on the new configuration.
type windowConfig struct {
	// state packs the index of the current window (high bits, modulo
	// 2^(64-cb)) and the units used in it (low cb bits). The count field set
	// to all ones (more than limit) marks the pristine limiter; windowFrozen
	// a configuration replaced by SetLimit.
	state atomic.Uint64
	_     [cacheLine - 8]byte // keeps the fields below, read by every decision, off the line state's writes move between cores

	limit  int64
	window time.Duration
	cb     uint          // bits of the count field
	cmask  uint64        // 1<<cb - 1
	since  time.Duration // the instant SetLimit made it; releases of earlier admissions are dropped
}

// windowFrozen is the state word of a replaced windowConfig: all ones, a
// count above any limit in a window that is never current.
const windowFrozen = ^uint64(0)

// NewFixedWindow returns a limiter that admits limit cost units per window.
//
// It fails when limit < 1 or above 2^40-2, window <= 0, or window is too
// short to count limit units in it exactly (window must be at least
// 4·2^bits(limit+1) nanoseconds, bits(n) being the length of n in binary:
// 512ns for a limit of 100, 4.2ms for a limit of a million).
func NewFixedWindow(limit int64, window time.Duration, opts ...Option) (*FixedWindow, error) {
	o, err := buildOptions("fixed-window", false, opts)
	if err != nil {
		return nil, err
	}
	c, err := newWindowConfig(limit, window)
	if err != nil {
		return nil, err
	}
	c.since = math.MinInt64
	c.state.Store(c.cmask) // pristine
	w := &FixedWindow{name: o.name}
	w.cfg.Store(c)
	return w, nil
}

func newWindowConfig(limit int64, window time.Duration) (*windowConfig, error) {
	if limit < 1 {
		return nil, fmt.Errorf("ratelimit: fixed window: limit %d must be at least 1", limit)
	}
	if window <= 0 {
		return nil, fmt.Errorf("ratelimit: fixed window: window %v must be positive", window)
	}
	cb := uint(bits.Len64(uint64(limit) + 1))
	if err := checkGranularity("fixed window", limit, 1<<40-2, window, cb); err != nil {
		return nil, err
	}
	return &windowConfig{limit: limit, window: window, cb: cb, cmask: 1<<cb - 1}, nil
}

// SetLimit changes the limit and the window, validated as NewFixedWindow
// validates them: on an error nothing changes. With the window unchanged,
// the units used in the current window stay used (a window already past
// the new limit admits nothing more until it ends); with a new window,
// they are counted in the new window that holds the current one's end,
// until that window ends. Safe while requests are decided; when the
// window changes, or limit+1 crosses a power of two, a request admitted
// in the current window and released after the change, within it, gives
// nothing back.
func (w *FixedWindow) SetLimit(limit int64, window time.Duration) error {
	defer policywindow.Changed() // once the new window is in place
	c, err := newWindowConfig(limit, window)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.cfg.Load()
	s := old.state.Swap(windowFrozen)
	used := s & old.cmask
	if used == old.cmask {
		c.since = old.since    // nothing admitted yet: no release to drop
		c.state.Store(c.cmask) // pristine
	} else {
		// The index of the window the state counts in: kept modulo
		// 2^(64-cb), which holds every index of an instant a window of
		// this length can tell apart (see checkGranularity).
		idx := int64(s) >> old.cb
		end := time.Duration(idx+1) * old.window // the end of that window
		if window != old.window {
			// The count moves to the new window that holds the old one's
			// last instant, so it is held no shorter than it would have
			// been; a later instant starts afresh, as in any new window.
			idx = floorDiv(int64(end)-1, int64(window))
		}
		if used > uint64(limit) {
			// Keep the count above a lowered limit, so that raising it
			// back in the same window gives nothing twice: widen the count
			// field when the window allows, else the window counts as full.
			cb := uint(bits.Len64(used + 1))
			if checkGranularity("fixed window", int64(used), 1<<40-2, window, cb) == nil {
				c.cb, c.cmask = cb, 1<<cb-1
			} else {
				used = uint64(limit)
			}
		}
		c.state.Store(uint64(idx)<<c.cb | used)
		c.since = old.since
		if window != old.window || c.cb != old.cb {
			// Tickets read otherwise now: every admission counted so far
			// came before that end, and its release, cut for the old
			// numbers, gives nothing back. With the same window and field
			// a ticket reads the same, and gives back to the count it was
			// counted in, carried over.
			c.since = end - 1
		}
	}
	w.cfg.Store(c)
	return nil
}

// checkGranularity reports an error when a counter of cb bits per slot of
// length slot cannot tell slots apart over the whole range of instants:
// slot indexes are kept modulo 2^(64-cb) and compared as signed numbers.
func checkGranularity(what string, limit, most int64, slot time.Duration, cb uint) error {
	if cb > 40 {
		return fmt.Errorf("ratelimit: %s: limit %d is too large (at most %d)", what, limit, most)
	}
	minSlot := time.Duration(1) << (cb + 2)
	if slot < minSlot {
		return fmt.Errorf("ratelimit: %s: %v is too short to count a limit of %d exactly (at least %v)", what, slot, limit, minSlot)
	}
	return nil
}

// slotDiff returns a - b for two slot indexes kept modulo 2^(64-cb) in the
// high bits of their words (low cb bits ignored), as a signed number.
func slotDiff(a, b uint64, cb uint) int64 {
	mask := ^uint64(0) << cb
	return int64((a&mask)-(b&mask)) >> cb
}

// Name returns the limiter's name, "ratelimit/fixed-window" unless set with
// WithName.
func (w *FixedWindow) Name() string { return w.name }

// rateWindow returns the length of a window.
func (w *FixedWindow) rateWindow() time.Duration { return w.cfg.Load().window }

// admitD decides as Admit does, with its answer as a Decision.
func (w *FixedWindow) admitD(ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	return w.decide(now, sluice.CostFrom(ctx))
}

// Done gives back what the admitted request took when o is sluice.Released
// and the window it was counted in is still the current one; other outcomes
// change nothing.
func (w *FixedWindow) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	if o != sluice.Released {
		return
	}
	c := w.cfg.Load()
	if now-max(latency, 0) <= c.since {
		return // admitted before a SetLimit, on another configuration
	}
	n := uint64(t) & c.cmask
	for {
		s := c.state.Load()
		used := s & c.cmask
		if used == c.cmask || slotDiff(s, uint64(t), c.cb) != 0 {
			return // pristine, replaced, or the window has moved on
		}
		give := min(n, used)
		if give == 0 || c.state.CompareAndSwap(s, s-give) {
			return
		}
	}
}

// allowNAt decides on a request of cost n at now, taking its quota when it
// is admitted: the bare answer, with no ticket, of the step tables in tests.
func (w *FixedWindow) allowNAt(now time.Duration, n int64) bool {
	_, res, _, _ := w.take(now, max(n, 1))
	return res == windowAllowed
}

// The answers of the window limiters' take.
const (
	windowRejected = iota
	windowAllowed
	windowNever // the cost exceeds the limit
)

// take decides on n >= 1 units at now and takes them when it admits. It
// returns its answer, the window they are counted in and the units used in
// it before them.
func (w *FixedWindow) take(now time.Duration, n int64) (c *windowConfig, res int, idx, used int64) {
	c = w.cfg.Load()
	cur := floorDiv(int64(now), int64(c.window))
	for {
		s := c.state.Load()
		if s == windowFrozen {
			c = w.cfg.Load() // SetLimit moved the state: decide on the new one
			cur = floorDiv(int64(now), int64(c.window))
			continue
		}
		idx, used = cur, int64(s&c.cmask)
		if uint64(used) == c.cmask {
			used = 0 // pristine: adopt the current window
		} else if diff := slotDiff(uint64(cur)<<c.cb, s, c.cb); diff <= 0 {
			idx = cur - diff // same window, or now lies before it: count there
		} else {
			used = 0 // a later window starts afresh
		}
		switch {
		case n > c.limit:
			return c, windowNever, idx, used
		case used+n > c.limit:
			return c, windowRejected, idx, min(used, c.limit)
		case c.state.CompareAndSwap(s, uint64(idx)<<c.cb|uint64(used+n)):
			return c, windowAllowed, idx, used
		}
	}
}

func (w *FixedWindow) decide(now time.Duration, n int64) (sluice.Decision, sluice.Ticket) {
	n = max(n, 1)
	c, res, idx, used := w.take(now, n)
	reset := time.Duration(idx+1)*c.window - now
	switch res {
	case windowAllowed:
		return allow(w.name, c.limit, c.limit-used-n, reset), sluice.Ticket(uint64(idx)<<c.cb | uint64(n))
	case windowRejected:
		return reject(w.name, c.limit, c.limit-used, reset, reset), 0
	}
	return never(w.name, c.limit, max(c.limit-used, 0), resetIf(used > 0, reset)), 0
}

// resetIf returns d when cond holds and 0 otherwise.
func resetIf(cond bool, d time.Duration) time.Duration {
	if cond {
		return d
	}
	return 0
}
