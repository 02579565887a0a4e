package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

func mustSlidingWindow(t testing.TB, limit int64, window time.Duration, buckets int, opts ...Option) *SlidingWindow {
	t.Helper()
	w, err := NewSlidingWindow(limit, window, buckets, opts...)
	require.NoError(t, err)
	return w
}

func TestSlidingWindowSteps(t *testing.T) {
	// 3 per 100ms in 4 buckets of 25ms: bucket k leaves at (k+4)·25ms.
	w := mustSlidingWindow(t, 3, 100*ms, 4)
	runSteps(t, w, []step{
		{at: 10 * ms, allowed: true, remaining: 2, reset: 90 * ms},
		{at: 30 * ms, allowed: true, remaining: 1, reset: 95 * ms},
		{at: 60 * ms, allowed: true, remaining: 0, reset: 90 * ms},
		// Full: the unit of bucket 0 leaves at 100ms.
		{at: 70 * ms, allowed: false, remaining: 0, reset: 80 * ms, retryAfter: 30 * ms},
		// Two units: those of buckets 0 and 1, the latter leaving at 125ms.
		{at: 70 * ms, n: 2, allowed: false, remaining: 0, reset: 80 * ms, retryAfter: 55 * ms},
		// Bucket 0 has left.
		{at: 100 * ms, allowed: true, remaining: 0, reset: 100 * ms},
		// The clock steps back to bucket 0: counted in the newest bucket.
		{at: 20 * ms, allowed: false, remaining: 0, reset: 180 * ms, retryAfter: 105 * ms},
		// Buckets 1 and 2 have left; a released unit comes back.
		{at: 150 * ms, allowed: true, remaining: 1, reset: 100 * ms, release: true},
		{at: 150 * ms, n: 2, allowed: true, remaining: 0, reset: 100 * ms},
		{at: 160 * ms, n: 4, allowed: false, remaining: 0, reset: 90 * ms, retryAfter: 0},
		// A jump past the whole window empties every bucket.
		{at: time.Hour, n: 3, allowed: true, remaining: 0, reset: 100 * ms},
	})
	require.ErrorIs(t, decideAt(w, time.Hour, 4).Cause, ErrNeverSatisfiable)
}

func TestSlidingWindowReleaseAfterBucketLeft(t *testing.T) {
	w := mustSlidingWindow(t, 2, 100*ms, 4)
	_, tk := admit(w, context.Background(), 0)
	require.True(t, w.allowNAt(110*ms, 1))
	// Its bucket left at 100ms; bucket 4, now current, shares its slot.
	w.Done(tk, sluice.Released, 110*ms, 110*ms)
	d := decideAt(w, 110*ms, 1)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(0), d.Remaining)
	assert.False(t, w.allowNAt(110*ms, 1))
}

func TestSlidingWindowValidation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limit   int64
		window  time.Duration
		buckets int
	}{
		{"zero limit", 0, time.Second, 10},
		{"zero window", 10, 0, 10},
		{"negative window", 10, -time.Second, 10},
		{"zero buckets", 10, time.Second, 0},
		{"negative buckets", 10, time.Second, -1},
		{"too many buckets", 10, time.Hour, 1 << 17},
		{"buckets not dividing the window", 10, time.Second, 7},
		{"bucket too short for the limit", 1_000_000, time.Second, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := NewSlidingWindow(tc.limit, tc.window, tc.buckets)
			require.Error(t, err)
			require.Nil(t, w)
		})
	}
}

func TestSlidingWindowClockAndName(t *testing.T) {
	clk := sluice.NewManualClock(0)
	w := mustSlidingWindow(t, 2, time.Second, 10, WithName("ratelimit/search"))
	assert.Equal(t, "ratelimit/search", w.Name())
	assert.True(t, w.allowNAt(clk.Now(), 1))
	clk.Advance(500 * ms)
	assert.True(t, w.allowNAt(clk.Now(), 1))
	assert.False(t, w.allowNAt(clk.Now(), 1))
	clk.Advance(500 * ms) // the first unit leaves
	assert.True(t, w.allowNAt(clk.Now(), 1))
	assert.False(t, w.allowNAt(clk.Now(), 1))
}

func TestSlidingWindowConformance(t *testing.T) {
	rateConformance(t, func(t *testing.T) sluice.Policy { return mustSlidingWindow(t, 10, 50*ms, 5) })
}

func TestSlidingWindowAllocatesNothing(t *testing.T) {
	assertAllocFree(t, mustSlidingWindow(t, 1000, time.Second, 10), ms)
}

func TestSlidingWindowConcurrentNeverOver(t *testing.T) {
	const limit, window, buckets = 50, 10 * ms, 5
	w := mustSlidingWindow(t, limit, window, buckets)
	start, end, admitted := hammer(t, w, 20*time.Microsecond)
	// Any run of 5 consecutive buckets holds at most the limit.
	bl := int64(window / buckets)
	spanned := floorDiv(int64(end), bl) - floorDiv(int64(start), bl) + 1
	bound := limit * ((spanned + buckets - 1) / buckets)
	t.Logf("admitted %d over %d buckets, bound %d", admitted, spanned, bound)
	assert.LessOrEqual(t, admitted, bound)
	assert.Positive(t, admitted)
}
