package ratelimit

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/policytest"
)

func mustGCRA(t testing.TB, r Rate, burst int64, opts ...Option) *GCRA {
	t.Helper()
	g, err := NewGCRA(r, burst, opts...)
	require.NoError(t, err)
	return g
}

func TestGCRASteps(t *testing.T) {
	const m = time.Millisecond
	// 10/s: T = 100ms; burst 3: τ = 300ms.
	g := mustGCRA(t, PerSecond(10), 3)
	runSteps(t, g, []step{
		{at: 0, allowed: true, remaining: 2, reset: 100 * m},
		{at: 0, n: 2, allowed: true, remaining: 0, reset: 300 * m},
		{at: 0, allowed: false, remaining: 0, reset: 300 * m, retryAfter: 100 * m},
		{at: 50 * m, allowed: false, remaining: 0, reset: 250 * m, retryAfter: 50 * m},
		{at: 100 * m, allowed: true, remaining: 0, reset: 300 * m},
		// Released at once gives the whole unit back.
		{at: 200 * m, allowed: true, remaining: 0, reset: 300 * m, release: true},
		{at: 200 * m, allowed: true, remaining: 0, reset: 300 * m},
		{at: 250 * m, n: 2, allowed: false, remaining: 0, reset: 250 * m, retryAfter: 150 * m},
		// More than the burst: never satisfiable, and the state is untouched.
		{at: time.Second, n: 4, allowed: false, remaining: 3, reset: 0, retryAfter: 0},
		{at: time.Second, n: 3, allowed: true, remaining: 0, reset: 300 * m},
		{at: 10 * time.Second, allowed: true, remaining: 2, reset: 100 * m},
		// The clock jumps back 5s: nothing extra, retry when it has caught up.
		{at: 5 * time.Second, allowed: false, remaining: 0, reset: 5100 * m, retryAfter: 4900 * m},
		{at: 10 * time.Second, allowed: true, remaining: 1, reset: 200 * m},
	})
	d := decideAt(g, 20*time.Second, 4)
	require.ErrorIs(t, d.Cause, ErrNeverSatisfiable)
	require.ErrorIs(t, d.Cause, sluice.ErrRateLimited)
	assert.Equal(t, int64(3), d.Limit)
	assert.Equal(t, g.Name(), d.Policy)
}

func TestGCRANegativeInstants(t *testing.T) {
	const m = time.Millisecond
	g := mustGCRA(t, PerSecond(10), 2)
	runSteps(t, g, []step{
		{at: -2 * time.Second, allowed: true, remaining: 1, reset: 100 * m},
		{at: -2 * time.Second, allowed: true, remaining: 0, reset: 200 * m},
		{at: -1950 * m, allowed: false, remaining: 0, reset: 150 * m, retryAfter: 50 * m},
		{at: -1900 * m, allowed: true, remaining: 0, reset: 200 * m},
		{at: 0, allowed: true, remaining: 1, reset: 100 * m},
	})
}

// TestGCRAIntervalRoundsUp pins that a rate whose interval is not a whole
// number of nanoseconds is never exceeded: 3/s spaces requests 333333334ns.
func TestGCRAIntervalRoundsUp(t *testing.T) {
	g := mustGCRA(t, PerSecond(3), 1)
	require.True(t, g.allowNAt(0, 1))
	require.False(t, g.allowNAt(333333333, 1))
	require.True(t, g.allowNAt(333333334, 1))
	d := decideAt(g, 333333334, 1)
	require.False(t, d.Allowed)
	assert.Equal(t, time.Duration(333333334), d.RetryAfter)
}

// TestBucketValidation checks the constructors that take a rate and a burst
// against the same bad input.
func TestBucketValidation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		r     Rate
		burst int64
		opts  []Option
	}{
		{"zero rate", Rate{}, 1, nil},
		{"negative count", Rate{Count: -1, Period: time.Second}, 1, nil},
		{"zero period", Rate{Count: 1}, 1, nil},
		{"faster than a nanosecond", Rate{Count: 10, Period: 5}, 1, nil},
		{"zero burst", PerSecond(1), 0, nil},
		{"negative burst", PerSecond(1), -3, nil},
		{"burst overflows", Rate{Count: 1, Period: time.Hour}, math.MaxInt64 / 2, nil},
		{"empty name", PerSecond(1), 1, []Option{WithName("")}},
		{"nil clock", PerSecond(1), 1, []Option{WithClock(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := NewGCRA(tc.r, tc.burst, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, g)
			tb, err := NewTokenBucket(tc.r, tc.burst, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, tb)
			w, err := NewWarmUp(tc.r, tc.burst, time.Second, 3, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, w)
		})
	}
	g := mustGCRA(t, PerSecond(1), 1, WithName("ratelimit/api"))
	assert.Equal(t, "ratelimit/api", g.Name())
	assert.Equal(t, "ratelimit/gcra", mustGCRA(t, PerSecond(1), 1).Name())
}

func TestGCRAClockOption(t *testing.T) {
	clk := sluice.NewManualClock(0)
	g := mustGCRA(t, PerSecond(1), 2)
	assert.True(t, g.allowNAt(clk.Now(), 1))
	assert.True(t, g.allowNAt(clk.Now(), 1))
	assert.False(t, g.allowNAt(clk.Now(), 1))
	assert.False(t, g.allowNAt(clk.Now(), 2))
	clk.Advance(2 * time.Second)
	assert.True(t, g.allowNAt(clk.Now(), 2))
	assert.False(t, g.allowNAt(clk.Now(), 3))
	// The system clock works without an injected one.
	s := mustGCRA(t, PerSecond(1), 1)
	assert.True(t, s.allowNAt(monoclock.Now(), 1))
	assert.False(t, s.allowNAt(monoclock.Now(), 1))
}

// TestGCRAReleaseAfterLatency pins that a release long after the admission
// gives back only what has not regenerated since.
func TestGCRAReleaseAfterLatency(t *testing.T) {
	const m = time.Millisecond
	g := mustGCRA(t, PerSecond(10), 2)
	_, tk := admit(g, context.Background(), 0)
	d2, _ := admit(g, context.Background(), 0)
	require.True(t, d2.Allowed)
	// Released 40ms later: its 100ms less the 40ms that have regenerated
	// since come back, TAT 200ms → 140ms.
	g.Done(tk, sluice.Released, 40*m, 40*m)
	d := decideAt(g, 40*m, 1)
	require.True(t, d.Allowed)
	assert.Equal(t, 200*m, d.Reset)
	// A release after the debt has regenerated gives nothing.
	g.Done(tk, sluice.Released, time.Second, time.Second)
	assert.False(t, g.allowNAt(40*m, 1))
	// Other outcomes give nothing back.
	g.Done(tk, sluice.Success, 40*m, 0)
	g.Done(tk, sluice.Failure, 40*m, 0)
	assert.False(t, g.allowNAt(40*m, 1))
}

func TestGCRAConformance(t *testing.T) {
	policytest.Run(t, policytest.Config{
		New:    func(t *testing.T) sluice.Policy { return mustGCRA(t, PerSecond(1000), 10) },
		Causes: []error{sluice.ErrRateLimited},
	})
}

// TestGCRABoundary is the boundary row of the literature for GCRA: 100 per
// second with a burst of 100, 100 requests at 0.99s and 100 at 1.01s. The
// first 100 empty the bucket; in the 20ms between the two bursts it refills
// by 20ms × 100/s = 2, so GCRA admits exactly 102, never 200.
func TestGCRABoundary(t *testing.T) {
	g := mustGCRA(t, PerSecond(100), 100)
	admitted := 0
	for _, at := range []time.Duration{990 * time.Millisecond, 1010 * time.Millisecond} {
		for range 100 {
			if d, tk := admit(g, context.Background(), at); d.Allowed {
				admitted++
				g.Done(tk, sluice.Success, at, 0)
			}
		}
	}
	assert.Equal(t, 102, admitted)
}

// bucketHammer has 64 goroutines call allow a bounded number of times each on a
// shared instant that advances by step per call, and checks that the admitted
// cost never exceeds burst + elapsed/interval. Goroutines read the instant
// before they decide, so the limiter also sees instants out of order.
func bucketHammer(t *testing.T, burst int64, iv, step time.Duration, allow func(now time.Duration) bool) int64 {
	t.Helper()
	const workers, calls = 64, 500
	var clock, admitted, latest atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range calls {
				now := clock.Add(int64(step))
				if allow(time.Duration(now)) {
					admitted.Add(1)
					for {
						l := latest.Load()
						if now <= l || latest.CompareAndSwap(l, now) {
							break
						}
					}
				}
			}
		})
	}
	wg.Wait()
	bound := burst + latest.Load()/int64(iv)
	require.LessOrEqual(t, admitted.Load(), bound, "admitted more than burst + elapsed × rate")
	require.Positive(t, admitted.Load())
	return admitted.Load()
}

func TestGCRAConcurrentNeverOver(t *testing.T) {
	g := mustGCRA(t, PerSecond(1000), 20)
	n := bucketHammer(t, 20, time.Millisecond, 10*time.Microsecond, func(now time.Duration) bool { return g.allowNAt(now, 1) })
	t.Logf("admitted %d", n)
}

func TestGCRAAllocatesNothing(t *testing.T) {
	g := mustGCRA(t, PerSecond(1_000_000), 1000)
	ctx := context.Background()
	var now time.Duration
	allocs := testing.AllocsPerRun(1000, func() {
		now += time.Microsecond
		g.allowNAt(now, 1)
		d, tk := admit(g, ctx, now)
		if d.Allowed {
			g.Done(tk, sluice.Released, now, 0)
		}
		_ = decideAt(g, now, 5000)
	})
	assert.Zero(t, allocs)
}

// TestBucketOfTheLargestToleranceHoldsItsBurst pins that the buckets whose
// burst × interval is exactly 2^62ns, the largest the constructors accept,
// still admit at most their burst: the test for room cannot overflow.
func TestBucketOfTheLargestToleranceHoldsItsBurst(t *testing.T) {
	for _, tc := range []struct {
		r     Rate
		burst int64
	}{
		{Every(1 << 62), 1},
		{Every(1 << 61), 2},
		{Every(1 << 60), 4},
	} {
		g := mustGCRA(t, tc.r, tc.burst)
		tb := mustTokenBucket(t, tc.r, tc.burst)
		limiters := map[string]func(time.Duration, int64) bool{"gcra": g.allowNAt, "token bucket": tb.AllowNAt}
		if w, err := NewWarmUp(tc.r, tc.burst, time.Second, 2); err == nil { // its cold interval fits
			limiters["warm-up"] = w.allowNAt
		}
		for name, allow := range limiters {
			require.True(t, allow(time.Second, tc.burst), "%s %v: the first burst", name, tc.r)
			for i := range 3 {
				assert.False(t, allow(time.Second, tc.burst), "%s %v: burst %d admitted again", name, tc.r, i+2)
			}
		}
		d := decideAt(g, time.Second, tc.burst)
		require.False(t, d.Allowed)
		assert.Equal(t, time.Duration(1<<62), d.RetryAfter)
	}
}
