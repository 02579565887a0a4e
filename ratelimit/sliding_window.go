package ratelimit

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policywindow"
)

// SlidingWindow admits at most limit cost units in any run of buckets
// consecutive buckets of length window/buckets: a window that slides one
// bucket at a time, kept as a ring of counters reused in place.
//
// A unit counted at instant t leaves the window at the start of its bucket plus
// window, between window-window/buckets and window after t; so any span
// shorter than window-window/buckets holds at most limit, and more buckets
// track the exact sliding window (SlidingLog) more closely. With one bucket it
// is a FixedWindow. Memory is one int64 per bucket; a decision is O(1) under a
// short lock, and a rejection scans the buckets once to compute RetryAfter.
//
// An instant older than the newest bucket seen (a clock stepping backwards,
// or a late caller) is counted in the newest bucket, so it never admits
// extra. Make one with NewSlidingWindow; the zero value is not usable.
type SlidingWindow struct {
	mu      sync.Mutex
	counts  []int64 // ring: bucket k lives at counts[k mod len]
	head    int64   // index of the newest bucket seen
	started bool    // head is meaningful
	total   int64   // sum of counts

	limit  int64
	window time.Duration
	bucket time.Duration // window / buckets
	nb     int64
	cb     uint
	cmask  uint64
	since  time.Duration // the instant of the last SetLimit: releases of earlier admissions are dropped
	name   string
}

// maxBuckets bounds the ring, which a rejection may scan whole.
const maxBuckets = 1 << 16

// NewSlidingWindow returns a limiter that admits limit cost units in any
// window of length window, tracked in buckets buckets of window/buckets each.
//
// It fails when limit < 1 or above 2^40-1, window <= 0, buckets is not
// within 1 to 65536, buckets does not divide window into whole nanoseconds,
// or a bucket is too short to count limit units exactly (at least
// 4·2^bits(limit) nanoseconds).
func NewSlidingWindow(limit int64, window time.Duration, buckets int, opts ...Option) (*SlidingWindow, error) {
	o, err := buildOptions("sliding-window", false, opts)
	if err != nil {
		return nil, err
	}
	w := &SlidingWindow{name: o.name, since: math.MinInt64}
	if err := w.shape(limit, window, buckets); err != nil {
		return nil, err
	}
	w.counts = make([]int64, buckets)
	return w, nil
}

// shape checks the numbers of a sliding window and, when they are valid,
// sets them (not the ring), holding w.mu or before w is shared.
func (w *SlidingWindow) shape(limit int64, window time.Duration, buckets int) error {
	switch {
	case limit < 1:
		return fmt.Errorf("ratelimit: sliding window: limit %d must be at least 1", limit)
	case window <= 0:
		return fmt.Errorf("ratelimit: sliding window: window %v must be positive", window)
	case buckets < 1 || buckets > maxBuckets:
		return fmt.Errorf("ratelimit: sliding window: %d buckets, want 1 to %d", buckets, maxBuckets)
	case window%time.Duration(buckets) != 0:
		return fmt.Errorf("ratelimit: sliding window: %d buckets do not divide the window %v", buckets, window)
	}
	bucket := window / time.Duration(buckets)
	cb := uint(bits.Len64(uint64(limit)))
	if err := checkGranularity("sliding window bucket", limit, 1<<40-1, bucket, cb); err != nil {
		return err
	}
	w.limit, w.window, w.bucket, w.nb, w.cb, w.cmask = limit, window, bucket, int64(buckets), cb, 1<<cb-1
	return nil
}

// SetLimit changes the limit, the window and its number of buckets,
// validated as NewSlidingWindow validates them: on an error nothing
// changes. The units counted in the window stay counted: with the same
// window and buckets, in their buckets; with another shape, each bucket's
// count moves to the first new bucket that leaves the window no sooner
// than it would have, as far as the bucket after the newest instant's (a
// shorter window holds them no longer than that). Safe while requests are
// decided; when the buckets change, or a limit crosses a power of two, a
// request admitted in the newest bucket and released after the change,
// within it, gives nothing back.
func (w *SlidingWindow) SetLimit(limit int64, window time.Duration, buckets int) error {
	defer policywindow.Changed() // once the new window is in place
	w.mu.Lock()
	defer w.mu.Unlock()
	counts, head, nb, bucket, cb := w.counts, w.head, w.nb, w.bucket, w.cb
	if err := w.shape(limit, window, buckets); err != nil {
		return err
	}
	if w.started && (w.nb != nb || w.bucket != bucket || w.cb != cb) {
		// Tickets read otherwise now: every admission so far came before
		// the newest bucket's end, and its release, cut for the old
		// numbers, gives nothing back. With the same buckets and field a
		// ticket reads the same, and gives back to its bucket.
		w.since = time.Duration(head+1)*bucket - 1
	}
	if w.nb == nb && w.bucket == bucket {
		return nil
	}
	w.counts = make([]int64, buckets)
	if !w.started {
		return nil
	}
	// Each old bucket's count goes to the first new bucket that leaves the
	// window no sooner than it would have, but no further ahead than the
	// bucket after the one of the newest instant seen: longer buckets may
	// start after the old one's (10 units at 4.5 s of 1 s buckets leave at
	// 14 s, not at 10 s with the 5 s bucket [0 s, 5 s) that holds their
	// end), and the head moves to that later bucket, the instants before
	// it counting there, as a clock stepping back does. A shorter window
	// holds what would outlast that no further: the units admitted from
	// then on count in the new window, not behind a head an old window's
	// length ahead. A count older than the new ring holds goes to its
	// oldest bucket.
	natural := floorDiv((head+1)*int64(bucket)-1, int64(w.bucket))
	target := func(k int64) int64 {
		return min(-floorDiv(-(k+nb)*int64(bucket), int64(w.bucket))-w.nb, natural+1)
	}
	w.head = natural
	for k := head - nb + 1; k <= head; k++ {
		if counts[slotOf(k, nb)] != 0 {
			w.head = max(w.head, target(k))
		}
	}
	for k := head - nb + 1; k <= head; k++ {
		n := counts[slotOf(k, nb)]
		if n == 0 {
			continue
		}
		w.counts[w.slot(max(target(k), w.head-w.nb+1))] += n
	}
	return nil
}

// slotOf returns the place of bucket k in a ring of nb buckets.
func slotOf(k, nb int64) int {
	i := k % nb
	if i < 0 {
		i += nb
	}
	return int(i)
}

// Name returns the limiter's name, "ratelimit/sliding-window" unless set with
// WithName.
func (w *SlidingWindow) Name() string { return w.name }

// rateWindow returns the window's length.
func (w *SlidingWindow) rateWindow() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.window
}

// admitD decides as Admit does, with its answer as a Decision.
func (w *SlidingWindow) admitD(ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	return w.decide(now, sluice.CostFrom(ctx), true)
}

// Done gives back what the admitted request took when o is sluice.Released
// and its bucket is still in the window; other outcomes change nothing.
func (w *SlidingWindow) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	if o != sluice.Released {
		return
	}
	w.mu.Lock()
	n := int64(uint64(t) & w.cmask)
	if w.started && now-max(latency, 0) > w.since {
		if back := slotDiff(uint64(w.head)<<w.cb, uint64(t), w.cb); back >= 0 && back < w.nb {
			i := w.slot(w.head - back)
			give := min(n, w.counts[i])
			w.counts[i] -= give
			w.total -= give
		}
	}
	w.mu.Unlock()
}

// allowNAt decides on a request of cost n at now, taking its quota when it
// is admitted: the bare answer, with no ticket, of the step tables in tests.
func (w *SlidingWindow) allowNAt(now time.Duration, n int64) bool {
	_, tk := w.decide(now, n, false)
	return tk != 0
}

func (w *SlidingWindow) slot(k int64) int { return slotOf(k, w.nb) }

// leaves returns the instant bucket k leaves the window.
func (w *SlidingWindow) leaves(k int64) time.Duration {
	return time.Duration(k+w.nb) * w.bucket
}

// advance moves the ring forward to bucket cur, emptying the buckets that
// left the window. It never moves backwards.
func (w *SlidingWindow) advance(cur int64) {
	if !w.started {
		w.head, w.started = cur, true
		return
	}
	if cur <= w.head {
		return
	}
	if cur-w.head >= w.nb {
		clear(w.counts)
		w.total = 0
	} else {
		for k := w.head + 1; k <= cur; k++ {
			i := w.slot(k)
			w.total -= w.counts[i]
			w.counts[i] = 0
		}
	}
	w.head = cur
}

// resetLocked returns the time from now until every counted unit has left.
func (w *SlidingWindow) resetLocked(now time.Duration) time.Duration {
	if w.total == 0 {
		return 0
	}
	for k := w.head; k > w.head-w.nb; k-- {
		if w.counts[w.slot(k)] > 0 {
			return w.leaves(k) - now
		}
	}
	return 0
}

// decide decides on a request of cost n at now and takes it when it admits.
// It returns a ticket, never 0, when it admits; and the Decision only when
// full is set.
func (w *SlidingWindow) decide(now time.Duration, n int64, full bool) (sluice.Decision, sluice.Ticket) {
	n = max(n, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.advance(floorDiv(int64(now), int64(w.bucket)))
	if n > w.limit {
		if !full {
			return sluice.Decision{}, 0
		}
		return never(w.name, w.limit, w.limit-w.total, w.resetLocked(now)), 0
	}
	if w.total+n > w.limit {
		if !full {
			return sluice.Decision{}, 0
		}
		need := w.total + n - w.limit
		retry := time.Duration(0)
		for k, freed := w.head-w.nb+1, int64(0); k <= w.head; k++ {
			if freed += w.counts[w.slot(k)]; freed >= need {
				retry = w.leaves(k) - now
				break
			}
		}
		return reject(w.name, w.limit, w.limit-w.total, w.resetLocked(now), retry), 0
	}
	w.counts[w.slot(w.head)] += n
	w.total += n
	tk := sluice.Ticket(uint64(w.head)<<w.cb | uint64(n))
	if !full {
		return sluice.Decision{}, tk
	}
	return allow(w.name, w.limit, w.limit-w.total, w.leaves(w.head)-now), tk
}
