package breaker

import (
	"math"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"
)

// The windows below are updated with atomic adds and swaps only, so the
// closed breaker's path takes no lock.
//
// Each window keeps a plain count of calls and two fields (failures and slow
// calls, or accepts). The count window packs its fields into one word of two
// signed 32-bit halves, added and subtracted in one atomic operation; its
// size keeps them far from 2³¹. The time window, whose counts have no such
// bound (a day's window of a busy service passes 2³¹ calls), keeps each
// field in a word of its own. Additions add the call count before the
// fields, and removals subtract the fields before the call count.

// pack returns the packed word of fields lo and hi.
func pack(lo, hi int64) uint64 { return uint64(lo) + uint64(hi)<<32 }

// unpack returns the two signed fields of a packed word.
func unpack(v uint64) (lo, hi int64) {
	lo = int64(int32(uint32(v)))
	hi = int64(v-uint64(lo)) >> 32
	return lo, hi
}

// tally is a snapshot of a window: calls, and the two packed fields.
type tally struct {
	total, lo, hi int64
}

// Slot codes of the count window: a call is present, failed, and/or slow.
const (
	codePresent uint32 = 1 << iota
	codeFailure
	codeSlow
)

func codeDelta(newCode, oldCode uint32) (total, fail, slow int64) {
	bit := func(c, b uint32) int64 {
		if c&b != 0 {
			return 1
		}
		return 0
	}
	return bit(newCode, codePresent) - bit(oldCode, codePresent),
		bit(newCode, codeFailure) - bit(oldCode, codeFailure),
		bit(newCode, codeSlow) - bit(oldCode, codeSlow)
}

// fastMod computes a mod d for d ≥ 1 with one multiplication, m being
// fastModMagic(d) (Lemire, Kaser, Kurz: "Faster remainder by direct
// computation").
func fastMod(a uint32, m uint64, d uint32) uint32 {
	hi, _ := bits.Mul64(m*uint64(a), uint64(d))
	return uint32(hi)
}

func fastModMagic(d uint32) uint64 { return ^uint64(0)/uint64(d) + 1 }

// countWindow holds the outcomes of the last size counted calls in a ring.
// Its position counts calls modulo wrapAt, a multiple of size, so the slot
// after the last of a lap is always the first: were it left to wrap at 2³²,
// which size need not divide, the call after the wrap would overwrite one of
// the newest instead of the oldest.
type countWindow struct {
	size   uint32
	magic  uint64
	wrapAt uint32
	pos    atomic.Uint32
	total  atomic.Int64
	fs     atomic.Uint64 // failures (lo), slow calls (hi)
	slots  []atomic.Uint32
}

func newCountWindow(size int) *countWindow {
	return &countWindow{size: uint32(size), magic: fastModMagic(uint32(size)),
		wrapAt: uint32(size) * (1 << 31 / uint32(size)), slots: make([]atomic.Uint32, size)}
}

// steady reports whether the ring is full of plain successes: one more
// success changes nothing in it.
func (w *countWindow) steady() bool {
	return w.fs.Load() == 0 && w.total.Load() == int64(w.size)
}

// record puts a call's code in the ring, replacing the oldest one, and
// reports whether the aggregates changed.
func (w *countWindow) record(code uint32) bool {
	if code == codePresent && w.steady() {
		// The ring is full of plain successes, and so it stays: whichever
		// slot this success replaced, the content would not change. No
		// write, so concurrent successes do not contend.
		return false
	}
	p := w.pos.Add(1) - 1
	if p == w.wrapAt {
		// One call gets wrapAt: it brings the position back a whole number
		// of laps. Positions handed out meanwhile, up to wrapAt plus the
		// calls in between, are still far below 2³².
		w.pos.Add(-w.wrapAt)
	}
	slot := &w.slots[fastMod(p, w.magic, w.size)]
	if slot.Load() == code {
		// The ring's content and aggregates stay as they are: the call
		// replaces an identical one.
		return false
	}
	old := slot.Swap(code)
	if old == code {
		return false
	}
	dt, df, ds := codeDelta(code, old)
	if dt != 0 {
		w.total.Add(dt)
	}
	if df != 0 || ds != 0 {
		w.fs.Add(pack(df, ds))
	}
	return true
}

func (w *countWindow) read() tally {
	f, s := unpack(w.fs.Load())
	return tally{total: w.total.Load(), lo: f, hi: s}
}

// bucket is one slice of time of a timeWindow.
type bucket struct {
	total  atomic.Int64
	lo, hi atomic.Int64 // failures and slow calls, or accepts
	epoch  atomic.Int64 // the epoch the bucket holds since it was last recycled
}

// timeWindow counts calls over the last n buckets of width each. Epoch e is
// the span [e·width, (e+1)·width) of the clock's instants; head is the newest
// epoch seen. The aggregates are the sum of the buckets, kept exact by
// subtracting from them whatever a bucket held when it is recycled for a new
// epoch. Without aggTotal the call count has no aggregate, and read sums the
// buckets' counts instead: a call that adds only to the count then costs one
// atomic add, not two.
type timeWindow struct {
	width    time.Duration
	n        int64
	magic    uint64
	aggTotal bool
	head     atomic.Int64  // noEpoch until the first call
	cleaning atomic.Uint64 // bucket recyclings started...
	cleaned  atomic.Uint64 // ...and finished
	total    atomic.Int64  // with aggTotal
	lo, hi   atomic.Int64
	bkts     []bucket
}

const noEpoch = math.MinInt64

func newTimeWindow(length time.Duration, buckets int, aggTotal bool) *timeWindow {
	w := &timeWindow{
		width:    length / time.Duration(buckets),
		n:        int64(buckets),
		magic:    fastModMagic(uint32(buckets)),
		aggTotal: aggTotal,
		bkts:     make([]bucket, buckets),
	}
	w.head.Store(noEpoch)
	for i := range w.bkts {
		w.bkts[i].epoch.Store(noEpoch)
	}
	return w
}

// epoch returns the epoch of instant now.
func (w *timeWindow) epoch(now time.Duration) int64 {
	if h := w.head.Load(); h != noEpoch {
		if off := now - time.Duration(h)*w.width; off >= 0 && off < w.width {
			return h
		}
	}
	e := int64(now / w.width)
	if now < 0 && now%w.width != 0 {
		e-- // floor
	}
	return e
}

func (w *timeWindow) bucketOf(e int64) *bucket {
	if e >= 0 && e <= math.MaxUint32 {
		return &w.bkts[fastMod(uint32(e), w.magic, uint32(w.n))]
	}
	return &w.bkts[(e%w.n+w.n)%w.n]
}

// advance moves the head to epoch e, emptying the buckets it passes.
func (w *timeWindow) advance(e int64) {
	for {
		h := w.head.Load()
		if e <= h {
			return
		}
		if !w.head.CompareAndSwap(h, e) {
			continue
		}
		from := h + 1
		if h == noEpoch || e-h > w.n {
			from = e - w.n + 1
		}
		w.cleaning.Add(1)
		for ep := from; ep <= e; ep++ {
			b := w.bucketOf(ep)
			if lo := b.lo.Swap(0); lo != 0 {
				w.lo.Add(-lo)
			}
			if hi := b.hi.Swap(0); hi != 0 {
				w.hi.Add(-hi)
			}
			t := b.total.Swap(0)
			if t != 0 && w.aggTotal {
				w.total.Add(-t)
			}
			b.epoch.Store(ep)
		}
		w.cleaned.Add(1)
		return
	}
}

// add counts total calls and the fields lo, hi in epoch e's bucket;
// an epoch older than the window goes to the newest bucket.
func (w *timeWindow) add(e int64, total, lo, hi int64) {
	h := w.head.Load()
	if e > h {
		w.advance(e)
		h = w.head.Load()
	}
	if e <= h-w.n {
		e = h
	}
	b := w.bucketOf(e)
	// The advance that published epoch e may still be recycling its bucket:
	// a count added before the bucket is emptied would be erased with it (and
	// taken off the aggregates). The bucket's epoch is stored once it is
	// empty, so wait for it; the wait is the few loads and swaps of one
	// recycling. An epoch already recycled past, or a window reset meanwhile,
	// is counted as it comes; the wait is bounded whatever happens.
	for spins := 0; spins < 1024; spins++ {
		if be := b.epoch.Load(); be >= e && be != noEpoch {
			break
		}
		if hh := w.head.Load(); hh < e {
			break // the window was reset meanwhile: no advance will publish e
		}
		if spins >= 32 {
			runtime.Gosched()
		}
	}
	if total != 0 {
		b.total.Add(total)
		if w.aggTotal {
			w.total.Add(total)
		}
	}
	if lo != 0 {
		b.lo.Add(lo)
		w.lo.Add(lo)
	}
	if hi != 0 {
		b.hi.Add(hi)
		w.hi.Add(hi)
	}
}

// read returns the aggregates as of the last advance. A read that overlaps
// the recycling of a bucket could see the bucket's failures but not its
// calls, and trip a breaker on a ratio above the real one: such a read is
// done again (a few times at most; recycling happens once a bucket).
func (w *timeWindow) read() tally {
	for i := 0; ; i++ {
		started := w.cleaning.Load()
		finished := w.cleaned.Load()
		lo, hi := w.lo.Load(), w.hi.Load()
		t := tally{total: w.calls(), lo: lo, hi: hi}
		if (started == finished && w.cleaning.Load() == started) || i == 8 {
			return t
		}
		runtime.Gosched()
	}
}

// failing reports whether the window holds any failure or slow call (any
// accept, for the adaptive throttle).
func (w *timeWindow) failing() bool { return w.lo.Load() != 0 || w.hi.Load() != 0 }

func (w *timeWindow) calls() int64 {
	if w.aggTotal {
		return w.total.Load()
	}
	var t int64
	for i := range w.bkts {
		t += w.bkts[i].total.Load()
	}
	return t
}

// readAt returns the counts of the window ending at instant now, without
// moving the window: it sums the buckets whose epoch lies in it, so a reader
// on another clock than the calls' can do no harm.
func (w *timeWindow) readAt(now time.Duration) tally {
	e := w.epoch(now)
	for i := 0; ; i++ {
		started := w.cleaning.Load()
		finished := w.cleaned.Load()
		var t tally
		for j := range w.bkts {
			b := &w.bkts[j]
			if ep := b.epoch.Load(); ep <= e-w.n || ep > e {
				continue
			}
			t.lo += b.lo.Load()
			t.hi += b.hi.Load()
			t.total += b.total.Load()
		}
		if (started == finished && w.cleaning.Load() == started) || i == 8 {
			return t
		}
		runtime.Gosched()
	}
}
