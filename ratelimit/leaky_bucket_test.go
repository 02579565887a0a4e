package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

func mustLeakyBucket(t testing.TB, r Rate, capacity int64, opts ...Option) *LeakyBucket {
	t.Helper()
	b, err := NewLeakyBucket(r, capacity, opts...)
	require.NoError(t, err)
	return b
}

func TestLeakyBucketSteps(t *testing.T) {
	// Leaks 10/s: a unit takes 100ms; holds 3.
	b := mustLeakyBucket(t, PerSecond(10), 3)
	runSteps(t, b, []step{
		{at: 0, allowed: true, remaining: 2, reset: 100 * ms},
		{at: 0, n: 2, allowed: true, remaining: 0, reset: 300 * ms},
		// Full: 50ms later half a unit has leaked, one fits in 50ms more.
		{at: 50 * ms, allowed: false, remaining: 0, reset: 250 * ms, retryAfter: 50 * ms},
		{at: 100 * ms, allowed: true, remaining: 0, reset: 300 * ms},
		// The clock steps back: the bucket reads fuller, nothing extra.
		{at: 50 * ms, allowed: false, remaining: 0, reset: 350 * ms, retryAfter: 150 * ms},
		// Empty at 400ms; a released request takes its unit back out.
		{at: 400 * ms, allowed: true, remaining: 2, reset: 100 * ms, release: true},
		{at: 400 * ms, allowed: true, remaining: 2, reset: 100 * ms},
		{at: 450 * ms, n: 4, allowed: false, remaining: 2, reset: 50 * ms, retryAfter: 0},
		{at: 450 * ms, n: 3, allowed: false, remaining: 2, reset: 50 * ms, retryAfter: 50 * ms},
	})
	require.ErrorIs(t, decideAt(b, 450*ms, 4).Cause, ErrNeverSatisfiable)
}

func TestLeakyBucketIntervalRoundsUp(t *testing.T) {
	// 3 per second: a unit takes 333,333,334ns, so never faster than the rate.
	b := mustLeakyBucket(t, PerSecond(3), 1)
	require.True(t, b.allowNAt(0, 1))
	assert.False(t, b.allowNAt(333_333_333, 1))
	assert.True(t, b.allowNAt(333_333_334, 1))
}

// TestLeakyBucketReleaseTakesOutWhatHasNotLeaked releases a request queued
// behind earlier content after some latency: the bucket ends as if the
// request had never come.
func TestLeakyBucketReleaseTakesOutWhatHasNotLeaked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		before  int64         // units in the bucket at 0, before the request
		latency time.Duration // from the request's admission to its release
	}{
		{"empty bucket, released at once", 0, 0},
		{"empty bucket, released after half its unit leaked", 0, 50 * ms},
		{"empty bucket, released after it leaked", 0, 250 * ms},
		{"behind two units, released at once", 2, 0},
		{"behind two units, released before they leaked", 2, 150 * ms},
		{"behind two units, released while its own leak", 2, 250 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			with := mustLeakyBucket(t, PerSecond(10), 5)
			without := mustLeakyBucket(t, PerSecond(10), 5)
			if tc.before > 0 {
				require.True(t, with.allowNAt(0, tc.before))
				require.True(t, without.allowNAt(0, tc.before))
			}
			d, tk := admit(with, sluice.WithCost(context.Background(), 2), 0)
			require.True(t, d.Allowed)
			with.Done(tk, sluice.Released, tc.latency, tc.latency)
			assert.Equal(t, without.cfg.Load().emptyAt.v.Load() < int64(tc.latency), with.cfg.Load().emptyAt.v.Load() <= int64(tc.latency), "both empty, or neither")
			if without.cfg.Load().emptyAt.v.Load() > int64(tc.latency) {
				assert.Equal(t, without.cfg.Load().emptyAt.v.Load(), with.cfg.Load().emptyAt.v.Load())
			}
			assert.Equal(t, decideAt(without, tc.latency, 1), decideAt(with, tc.latency, 1))
		})
	}
}

func TestLeakyBucketValidation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rate     Rate
		capacity int64
	}{
		{"zero rate", Rate{}, 10},
		{"negative count", Rate{Count: -1, Period: time.Second}, 10},
		{"zero period", Rate{Count: 1}, 10},
		{"zero capacity", PerSecond(10), 0},
		{"negative capacity", PerSecond(10), -3},
		{"drains too slowly to track", Rate{Count: 1, Period: time.Hour}, 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewLeakyBucket(tc.rate, tc.capacity)
			require.Error(t, err)
			require.Nil(t, b)
		})
	}
}

func TestLeakyBucketClockAndName(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := mustLeakyBucket(t, Every(100*ms), 2, WithName("ratelimit/upload"))
	assert.Equal(t, "ratelimit/upload", b.Name())
	assert.True(t, b.allowNAt(clk.Now(), 2))
	assert.False(t, b.allowNAt(clk.Now(), 1))
	clk.Advance(100 * ms)
	assert.True(t, b.allowNAt(clk.Now(), 1))
	assert.False(t, b.allowNAt(clk.Now(), 1))
	assert.False(t, b.allowNAt(clk.Now(), 3))
}

func TestLeakyBucketConformance(t *testing.T) {
	rateConformance(t, func(t *testing.T) sluice.Policy { return mustLeakyBucket(t, Every(5*ms), 10) })
}

func TestLeakyBucketAllocatesNothing(t *testing.T) {
	assertAllocFree(t, mustLeakyBucket(t, PerSecond(1000), 100), ms)
}

func TestLeakyBucketConcurrentNeverOver(t *testing.T) {
	const capacity = 20
	b := mustLeakyBucket(t, PerSecond(1000), capacity)
	start, end, admitted := hammer(t, b, 10*time.Microsecond)
	bound := capacity + int64(end-start)/int64(ms)
	t.Logf("admitted %d, bound %d", admitted, bound)
	assert.LessOrEqual(t, admitted, bound)
	assert.Positive(t, admitted)
}

// A release after an earlier request's release takes out no more than is
// left of it: the content ahead of it shrank, so its place in the ticket is
// stale, and the bucket must not admit beyond its capacity.
func TestLeakyBucketReleaseAfterAnEarlierRelease(t *testing.T) {
	b, err := NewLeakyBucket(PerSecond(1), 5) // one unit leaks per second
	if err != nil {
		t.Fatal(err)
	}
	two := sluice.WithCost(context.Background(), 2)
	_, tA := admit(b, two, 0)         // A: 2 units
	_, tB := admit(b, two, 0)         // B: 2 units behind A
	b.Done(tA, sluice.Released, 0, 0) // A out at once: B leaks over [0s, 2s)
	b.Admit(two, 0)                   // C: 2 units behind B
	// At 1.5s B holds half a unit and C 2; B's release takes out its half,
	// leaving room for 3.
	at := 1500 * time.Millisecond
	b.Done(tB, sluice.Released, at, at)
	admitted := 0
	for b.allowNAt(at, 1) {
		admitted++
	}
	if admitted != 3 {
		t.Errorf("admitted %d units at 1.5s, want 3 (capacity 5, C's 2 units inside)", admitted)
	}
}

// A release that carries an early instant but runs after a later
// admission (two goroutines of a Guard: the first read the clock at 0 and
// is released at once, the second read it at 1 ns and was admitted before
// that release ran) leaves the later ticket stale: its own release then
// takes out what surely remains of it, not the content of a request behind
// it. Had it trusted its place, it would have emptied C's 5 units.
func TestLeakyBucketReleaseRunLateIsKnownByItsContent(t *testing.T) {
	b, err := NewLeakyBucket(PerSecond(1000), 20) // 1 ms a unit
	require.NoError(t, err)
	five, ten := sluice.WithCost(context.Background(), 5), sluice.WithCost(context.Background(), 10)
	_, tA := admit(b, ten, 0)
	_, tB := admit(b, five, 1)
	d, _ := admit(b, five, 1) // C stays
	require.True(t, d.Allowed)
	b.Done(tA, sluice.Released, 0, 0)
	// At 5 ms B has leaked out (A went at 0); C's 5 units are all inside.
	const now = 5 * time.Millisecond
	b.Done(tB, sluice.Released, now, now-1)
	admitted := 0
	for admitted <= 20 && b.allowNAt(now, 1) {
		admitted++
	}
	assert.LessOrEqual(t, admitted, 15, "units admitted at 5 ms with C's 5 inside a bucket of 20")
}

// With no release in between, a release is still exact behind earlier
// content: it takes out all of a request that has not begun to leak.
func TestLeakyBucketReleaseBehindContentIsExact(t *testing.T) {
	b, err := NewLeakyBucket(PerSecond(1), 5)
	if err != nil {
		t.Fatal(err)
	}
	two := sluice.WithCost(context.Background(), 2)
	b.Admit(two, 0)           // A: leaks over [0s, 2s)
	_, tB := admit(b, two, 0) // B: [2s, 4s)
	at := time.Second
	b.Done(tB, sluice.Released, at, at) // all of B is left
	admitted := 0
	for b.allowNAt(at, 1) {
		admitted++
	}
	if admitted != 4 {
		t.Errorf("admitted %d units at 1s, want 4 (A's one unit inside)", admitted)
	}
}
