package breaker

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policytest"
)

func TestPackUnpackSignedFields(t *testing.T) {
	for _, c := range []struct{ lo, hi int64 }{
		{0, 0}, {1, 0}, {0, 1}, {-1, 0}, {0, -1}, {-1, -1}, {5, -3},
		{math.MaxInt32, math.MaxInt32}, {math.MinInt32, math.MinInt32}, {math.MinInt32, math.MaxInt32},
	} {
		lo, hi := unpack(pack(c.lo, c.hi))
		assert.Equal(t, c, struct{ lo, hi int64 }{lo, hi})
	}
	// Sums of packed words are packed sums, even across a transient negative.
	v := pack(3, 2) + pack(-5, 1) + pack(4, -3)
	lo, hi := unpack(v)
	assert.Equal(t, int64(2), lo)
	assert.Equal(t, int64(0), hi)
}

func TestFastModMatchesModulo(t *testing.T) {
	for _, d := range []uint32{1, 2, 3, 7, 10, 100, 1000, 65536, 1 << 24} {
		m := fastModMagic(d)
		for _, a := range []uint32{0, 1, 2, d - 1, d, d + 1, 12345, 1<<31 + 7, math.MaxUint32} {
			require.Equal(t, a%d, fastMod(a, m, d), "%d mod %d", a, d)
		}
	}
}

func TestCountWindowKeepsLastN(t *testing.T) {
	w := newCountWindow(3)
	s, f := codePresent, codePresent|codeFailure
	steps := []struct {
		code          uint32
		changed       bool
		total, failed int64
	}{
		{s, true, 1, 0},
		{f, true, 2, 1},
		{f, true, 3, 2},
		{s, false, 3, 2}, // replaces the first success
		{s, true, 3, 1},  // replaces a failure
		{s, true, 3, 0},
		{s, false, 3, 0},
	}
	for i, st := range steps {
		assert.Equal(t, st.changed, w.record(st.code), "step %d", i)
		got := w.read()
		assert.Equal(t, tally{total: st.total, lo: st.failed}, got, "step %d", i)
	}
}

func TestCountWindowConcurrentAggregatesMatchRing(t *testing.T) {
	w := newCountWindow(37)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				code := codePresent
				if (i+g)%3 == 0 {
					code |= codeFailure
				}
				if (i+g)%5 == 0 {
					code |= codeSlow
				}
				w.record(code)
			}
		}()
	}
	wg.Wait()
	var want tally
	for i := range w.slots {
		c := w.slots[i].Load()
		dt, df, ds := codeDelta(c, 0)
		want.total += dt
		want.lo += df
		want.hi += ds
	}
	assert.Equal(t, want, w.read())
	assert.Equal(t, int64(37), want.total)
}

func TestTimeWindowRollsBuckets(t *testing.T) {
	const sec = time.Second
	w := newTimeWindow(10*sec, 10, true) // buckets of 1s
	add := func(at time.Duration, fail int64) { w.add(w.epoch(at), 1, fail, 0) }
	add(100*sec, 1)
	add(100*sec+999*time.Millisecond, 0)
	add(105*sec, 1)
	assert.Equal(t, tally{total: 3, lo: 2}, w.readAt(109*sec+999*time.Millisecond))
	// At 110s the bucket of [100s, 101s) leaves the window.
	assert.Equal(t, tally{total: 1, lo: 1}, w.readAt(110*sec))
	add(110*sec, 0)
	assert.Equal(t, tally{total: 2, lo: 1}, w.readAt(114*sec))
	// Idle for longer than the window: everything has left. Reading does not
	// move the window.
	assert.Equal(t, tally{}, w.readAt(200*sec))
	assert.Equal(t, tally{total: 2, lo: 1}, w.read())
	// An instant older than the window counts in the newest bucket.
	add(50*sec, 1)
	assert.Equal(t, tally{total: 3, lo: 2}, w.readAt(114*sec))
	// Negative instants are instants like any other.
	n := newTimeWindow(10*sec, 10, true)
	n.add(n.epoch(-15*sec), 1, 1, 0)
	n.add(n.epoch(-5500*time.Millisecond), 1, 0, 0)
	assert.Equal(t, tally{total: 2, lo: 1}, n.readAt(-5*sec-1))
	assert.Equal(t, tally{total: 1}, n.readAt(-5*sec))
	assert.Equal(t, tally{}, n.readAt(5*sec))
}

func TestTimeWindowConcurrentAggregatesMatchBuckets(t *testing.T) {
	w := newTimeWindow(80*time.Millisecond, 8, true)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4000 {
				at := time.Duration(i*50+g) * time.Microsecond
				w.add(w.epoch(at), 1, int64(i%2), int64((i+g)%3%2))
			}
		}()
	}
	wg.Wait()
	var sum tally
	for i := range w.bkts {
		sum.total += w.bkts[i].total.Load()
		sum.lo += w.bkts[i].lo.Load()
		sum.hi += w.bkts[i].hi.Load()
	}
	assert.Equal(t, sum, w.read(), "aggregates must equal the sum of the buckets")
}

// Counts added while another goroutine turns the window over to their own
// epoch are kept: the recycling of the new bucket must not erase them. For
// each of 500 epochs, 8 goroutines race to count one failure in it (and so to
// open it); the window of 4 buckets then holds exactly the last 4 epochs'.
func TestTimeWindowKeepsCountsAddedDuringTurnover(t *testing.T) {
	const workers, epochs, buckets = 8, 500, 4
	w := newTimeWindow(buckets*time.Millisecond, buckets, true)
	for e := int64(0); e < epochs; e++ {
		var start, wg sync.WaitGroup
		start.Add(1)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.Wait()
				w.add(e, 1, 1, 0)
			}()
		}
		start.Done()
		wg.Wait()
	}
	assert.Equal(t, tally{total: workers * buckets, lo: workers * buckets}, w.read())
}

// The count window's position comes back a whole number of laps before it
// could wrap at 2³², so the call after a lap replaces the oldest one even
// when the size does not divide 2³². The position is set as many calls would
// have left it (the ring holding only successes, its content is the same
// whatever the history).
func TestCountWindowKeepsItsOrderAcrossTheWrap(t *testing.T) {
	b, err := New("wrap", WithCountWindow(5), WithErrorCount(2, 5))
	require.NoError(t, err)
	call := func(o sluice.Outcome) {
		v := policytest.AnswerOf(b.Admit(context.Background(), 0))
		require.NoError(t, v.Cause)
		b.Done(v.Ticket, o, 0, 0)
	}
	for range 5 {
		call(sluice.Success)
	}
	cw := b.cur.Load().cw
	cw.pos.Store(cw.wrapAt - 1)
	call(sluice.Failure) // the last slot of a lap
	call(sluice.Success) // the first slot: replaces the oldest success
	assert.Less(t, cw.pos.Load(), uint32(5), "the position came back")
	assert.Equal(t, int64(1), b.Counts().Failures, "the last 5 calls: S S S F S")
	call(sluice.Failure)
	assert.Equal(t, StateOpen, b.State(), "2 failures in the last 5 calls trip WithErrorCount(2, 5)")
}

// A time window counts past 2³¹ accepts (25k requests a second over a day):
// a healthy dependency behind an adaptive throttle with a long window is
// not throttled when its accepts pass the 32-bit mark.
func TestAdaptiveCountsPast2To31Accepts(t *testing.T) {
	a, err := NewAdaptive("long", WithRollingWindow(24*time.Hour, 1440))
	require.NoError(t, err)
	now := time.Hour
	a.win.Load().add(a.win.Load().epoch(now), math.MaxInt32, math.MaxInt32, 0) // as 2³¹-1 accepted calls
	a.Done(0, sluice.Success, now, 0)
	req, acc := a.Requests(now)
	assert.Equal(t, req, acc, "every request was accepted")
	assert.Equal(t, int64(math.MaxInt32)+1, acc)
	assert.Zero(t, a.RejectProbability(now), "a healthy dependency is not throttled")
}
