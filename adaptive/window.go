package adaptive

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// bucket counts one slice of the rolling window. epoch is the bucket's
// index in time (instant / bucket duration); a writer whose epoch does not
// match has arrived too late and its sample is dropped.
type bucket struct {
	epoch    atomic.Int64
	admitted atomic.Int64
	passed   atomic.Int64
	rtSum    atomic.Int64
	_        [32]byte // a bucket per half cache line at most
}

// window is a ring of buckets over the last n bucket durations. Writers add
// to the current bucket with atomics; the first writer of a new bucket rolls
// the ring under a mutex and recomputes the statistics of the completed
// buckets, which readers then load with one atomic each.
type window struct {
	dur    time.Duration
	n      int64 // buckets in the window
	perSec int64 // buckets in one second, at most n
	mask   int64
	ring   []bucket

	cur atomic.Int64 // epoch of the newest bucket

	mu sync.Mutex

	// Statistics over the completed buckets, recomputed at each roll.
	estimate  atomic.Int64 // maxPass × minRT in requests; math.MaxInt64 while unknown
	maxPass   atomic.Int64 // most requests ended in one bucket
	minRT     atomic.Int64 // lowest per-bucket average latency, ns; 0 while unknown
	avgRT     atomic.Int64 // average latency over the last second, ns
	secBefore atomic.Int64 // requests admitted in the perSec-1 buckets before the current one
}

func newWindow(span time.Duration, n int) *window {
	size := int64(1) << bits.Len64(uint64(n-1))
	w := &window{
		dur:  span / time.Duration(n),
		n:    int64(n),
		mask: size - 1,
		ring: make([]bucket, size),
	}
	w.perSec = min(max(int64(time.Second/w.dur), 1), w.n)
	for i := range w.ring {
		w.ring[i].epoch.Store(math.MinInt64)
	}
	w.cur.Store(math.MinInt64)
	w.estimate.Store(math.MaxInt64)
	return w
}

// index returns the epoch of instant now: most often the current one, found
// without a division.
func (w *window) index(now time.Duration) int64 {
	if c := w.cur.Load(); c != math.MinInt64 {
		if start := time.Duration(c) * w.dur; now >= start && now-start < w.dur {
			return c
		}
	}
	i := int64(now / w.dur)
	if now < 0 && now%w.dur != 0 {
		i--
	}
	return i
}

// advance makes epoch idx the current bucket if it is newer.
func (w *window) advance(idx int64) {
	if idx > w.cur.Load() {
		w.roll(idx)
	}
}

func (w *window) roll(idx int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.cur.Load()
	if idx <= c {
		return
	}
	first := idx - w.n + 1
	if c != math.MinInt64 && c+1 > first {
		first = c + 1
	}
	for e := first; e <= idx; e++ {
		b := &w.ring[e&w.mask]
		b.admitted.Store(0)
		b.passed.Store(0)
		b.rtSum.Store(0)
		b.epoch.Store(e)
	}
	w.cur.Store(idx)

	var maxPass, minRT int64
	var secPass, secRT, secAdmitted int64
	for e := idx - w.n + 1; e < idx; e++ {
		b := &w.ring[e&w.mask]
		if b.epoch.Load() != e {
			continue
		}
		p, rt := b.passed.Load(), b.rtSum.Load()
		if idx-e <= w.perSec {
			secPass += p
			secRT += rt
		}
		if idx-e < w.perSec {
			secAdmitted += b.admitted.Load()
		}
		if p == 0 {
			continue
		}
		maxPass = max(maxPass, p)
		if avg := max(rt/p, 1); minRT == 0 || avg < minRT {
			minRT = avg
		}
	}
	w.maxPass.Store(maxPass)
	w.minRT.Store(minRT)
	est := int64(math.MaxInt64)
	if maxPass > 0 {
		est = max(int64(math.Round(float64(maxPass)*float64(minRT)/float64(w.dur))), 1)
	}
	w.estimate.Store(est)
	if secPass > 0 {
		w.avgRT.Store(secRT / secPass)
	} else {
		w.avgRT.Store(0)
	}
	w.secBefore.Store(secAdmitted)
}

// admitted counts an admitted request in bucket idx.
func (w *window) admit(idx int64) {
	if b := &w.ring[idx&w.mask]; b.epoch.Load() == idx {
		b.admitted.Add(1)
	}
}

// unadmit takes back an admission counted in bucket idx, if that bucket is
// still in the ring.
func (w *window) unadmit(idx int64) {
	if b := &w.ring[idx&w.mask]; b.epoch.Load() == idx {
		b.admitted.Add(-1)
	}
}

// lastSecond returns the requests admitted in the last second, the current
// bucket included.
func (w *window) lastSecond(idx int64) int64 {
	n := w.secBefore.Load()
	if b := &w.ring[idx&w.mask]; b.epoch.Load() == idx {
		n += b.admitted.Load()
	}
	return n
}

// record adds an ended request's latency to the bucket of its end instant.
func (w *window) record(now, latency time.Duration) {
	idx := w.index(now)
	w.advance(idx)
	if b := &w.ring[idx&w.mask]; b.epoch.Load() == idx {
		b.passed.Add(1)
		b.rtSum.Add(int64(max(latency, 0)))
	}
}
