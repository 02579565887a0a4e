package adaptive_test

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
)

func TestBulkheadRejectsOverLimit(t *testing.T) {
	b, err := adaptive.NewBulkhead(2)
	require.NoError(t, err)
	assert.Equal(t, "adaptive/bulkhead", b.Name())
	ctx := context.Background()
	d1, t1 := admit(b, ctx, 0)
	require.True(t, d1.Allowed)
	assert.Equal(t, sluice.Decision{Allowed: true, Policy: "adaptive/bulkhead", Limit: -1}, d1, "slots are no quota over time")
	d2, t2 := admit(b, ctx, 0)
	require.True(t, d2.Allowed)
	assert.Equal(t, adaptive.LimitStats{Limit: 2, Inflight: 2}, b.Stats())
	d3, _ := admit(b, ctx, 0)
	require.False(t, d3.Allowed)
	require.ErrorIs(t, d3.Cause, sluice.ErrConcurrencyLimited)
	assert.Equal(t, int64(-1), d3.Limit)
	assert.Equal(t, time.Millisecond, d3.RetryAfter, "no latency measured yet: 1 ms")

	b.Done(t1, sluice.Ignored, 0, 0)
	d4, t4 := admit(b, ctx, 0)
	require.True(t, d4.Allowed, "an Ignored outcome frees the slot")
	b.Done(t2, sluice.Released, 0, 0)
	b.Done(t4, sluice.Success, 0, 5*ms)
	assert.Equal(t, adaptive.LimitStats{Limit: 2}, b.Stats())
}

func TestConcurrencyLimitValidation(t *testing.T) {
	bad := [][]adaptive.Option{
		{adaptive.WithAlgorithm(nil)},
		{adaptive.WithQueue(-1, 0)},
		{adaptive.WithQueue(1, -time.Second)},
		{adaptive.WithCPUThreshold(0.5)},
		{adaptive.WithAlgorithm(adaptive.Gradient{Tolerance: 0.5})},
		{adaptive.WithAlgorithm(adaptive.Gradient{MinLimit: 10, InitialLimit: 5})},
		{adaptive.WithAlgorithm(adaptive.Gradient{MaxLimit: 5, MinLimit: 10})},
		{adaptive.WithAlgorithm(adaptive.Gradient{ProbeEvery: 1})},
		{adaptive.WithAlgorithm(adaptive.Gradient{Window: -1})},
		{adaptive.WithAlgorithm(adaptive.AIMD{BackoffRatio: 1})},
		{adaptive.WithAlgorithm(adaptive.AIMD{Timeout: -1})},
		{adaptive.WithAlgorithm(adaptive.AIMD{MinSamples: -1})},
		{adaptive.WithAlgorithm(adaptive.Fixed{})},
	}
	for i, opts := range bad {
		_, err := adaptive.NewConcurrencyLimit(opts...)
		require.Error(t, err, "case %d", i)
	}
	_, err := adaptive.NewBulkhead(0)
	require.Error(t, err)
	_, err = adaptive.NewBulkhead(3, adaptive.WithAlgorithm(adaptive.AIMD{}))
	require.Error(t, err)
	l, err := adaptive.NewConcurrencyLimit()
	require.NoError(t, err)
	assert.Equal(t, int64(20), l.Stats().Limit)
	assert.Equal(t, "adaptive/concurrency", l.Name())
}

// TestConcurrencyLimitWindows checks that Done ends a window once it is
// long enough and has enough samples, and applies the algorithm's answer:
// AIMD grows after a fast window in use, and backs off after a slow one.
func TestConcurrencyLimitWindows(t *testing.T) {
	l, err := adaptive.NewConcurrencyLimit(adaptive.WithAlgorithm(adaptive.AIMD{
		InitialLimit: 10, Window: 100 * ms, MinSamples: 4, Timeout: 50 * ms,
	}))
	require.NoError(t, err)
	ctx := context.Background()
	// batch admits n requests at once and ends them at at with latency rt.
	batch := func(at time.Duration, n int, rt time.Duration, o sluice.Outcome) {
		tks := make([]sluice.Ticket, n)
		for i := range n {
			d, tk := admit(l, ctx, at)
			require.True(t, d.Allowed, "%+v", d)
			tks[i] = tk
		}
		for _, tk := range tks {
			l.Done(tk, o, at, rt)
		}
	}
	batch(0, 6, 10*ms, sluice.Success) // window [0, 100ms): 6 in use of 10, fast
	assert.Equal(t, int64(10), l.Stats().Limit, "the window is not over")
	batch(50*ms, 6, 10*ms, sluice.Ignored)  // ignored: no samples
	batch(100*ms, 1, 10*ms, sluice.Success) // ends it: grow
	assert.Equal(t, int64(11), l.Stats().Limit)
	assert.Equal(t, 10*ms, l.Stats().AvgRT)
	batch(150*ms, 6, 60*ms, sluice.Success) // slow
	batch(200*ms, 1, 10*ms, sluice.Success) // ends it: 11 × 0.9
	assert.Equal(t, int64(9), l.Stats().Limit)
	batch(250*ms, 2, 10*ms, sluice.Success) // only 3 samples: the window stays open
	batch(300*ms, 1, 10*ms, sluice.Success)
	assert.Equal(t, int64(9), l.Stats().Limit)
	batch(350*ms, 1, 10*ms, sluice.Failure) // joins the open window: 3 samples, under the minimum of 4
	assert.Equal(t, int64(9), l.Stats().Limit)
	batch(400*ms, 3, 10*ms, sluice.Success) // ends the window that holds the failure: the limit shrinks
	batch(450*ms, 1, 10*ms, sluice.Success)
	assert.Equal(t, int64(8), l.Stats().Limit)
}

func TestConcurrencyLimitQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(2, 50*ms))
		require.NoError(t, err)
		ctx := context.Background()
		d, first := admit(b, ctx, 0)
		require.True(t, d.Allowed)

		type result struct {
			d  sluice.Decision
			tk sluice.Ticket
			at time.Time
		}
		start := time.Now()
		wait := func(ctx context.Context) chan result {
			ch := make(chan result, 1)
			go func() {
				d, tk := admit(b, ctx, 0)
				ch <- result{d, tk, time.Now()}
			}()
			synctest.Wait() // queued
			return ch
		}
		w1 := wait(ctx)
		short, cancel := context.WithTimeout(ctx, 20*ms)
		defer cancel()
		w2 := wait(short)
		assert.Equal(t, int64(2), b.Stats().Waiting)
		d, _ = admit(b, ctx, 0)
		require.ErrorIs(t, d.Cause, sluice.ErrConcurrencyLimited, "queue full")

		// w2's context runs out after 20 ms; it leaves the queue.
		r2 := <-w2
		require.False(t, r2.d.Allowed)
		require.ErrorIs(t, r2.d.Cause, sluice.ErrConcurrencyLimited)
		assert.Equal(t, 20*ms, r2.at.Sub(start))
		assert.Equal(t, int64(1), b.Stats().Waiting)

		// The holder ends at 30 ms: w1 gets the slot.
		time.Sleep(10 * ms)
		b.Done(first, sluice.Success, 0, 30*ms)
		r1 := <-w1
		require.True(t, r1.d.Allowed, "%+v", r1.d)
		assert.Equal(t, 30*ms, r1.at.Sub(start))

		// A third waiter gives up after the 50 ms maximum wait.
		w3 := wait(ctx)
		r3 := <-w3
		require.False(t, r3.d.Allowed)
		assert.Equal(t, 80*ms, r3.at.Sub(start))

		// A context already done is rejected without queueing.
		done, cancelDone := context.WithCancel(ctx)
		cancelDone()
		d, _ = admit(b, done, 0)
		require.False(t, d.Allowed)

		b.Done(r1.tk, sluice.Success, 0, ms)
		assert.Equal(t, adaptive.LimitStats{Limit: 1, AvgRT: 0}, adaptive.LimitStats{Limit: b.Stats().Limit, Inflight: b.Stats().Inflight, Waiting: b.Stats().Waiting})
	})
}

func TestConcurrencyLimitAllocs(t *testing.T) {
	l, err := adaptive.NewConcurrencyLimit(adaptive.WithAlgorithm(adaptive.Gradient{Window: 10 * ms}))
	require.NoError(t, err)
	ctx := context.Background()
	now := time.Duration(0)
	allocs := testing.AllocsPerRun(2000, func() {
		now += 100 * time.Microsecond
		d, tk := admit(l, ctx, now)
		if d.Allowed {
			l.Done(tk, sluice.Success, now, ms)
		}
	})
	assert.Zero(t, allocs)
}

// TestConcurrencyLimitQueueNoLeak runs many callers through a small queued
// limit with short waits and cancellations racing against releases: every
// slot comes back and the limit is never exceeded.
func TestConcurrencyLimitQueueNoLeak(t *testing.T) {
	b, err := adaptive.NewBulkhead(3, adaptive.WithQueue(4, 200*time.Microsecond))
	require.NoError(t, err)
	var inside, peak atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 300 {
				ctx, cancel := context.WithCancel(context.Background())
				if (w+i)%5 == 0 {
					go cancel() // races with the wait
				}
				d, tk := admit(b, ctx, 0)
				if d.Allowed {
					n := inside.Add(1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					runtime.Gosched()
					inside.Add(-1)
					b.Done(tk, sluice.Success, 0, ms)
				} else {
					require.ErrorIs(t, d.Cause, sluice.ErrConcurrencyLimited)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	st := b.Stats()
	assert.Equal(t, int64(0), st.Inflight, "every slot came back")
	assert.Equal(t, int64(0), st.Waiting)
	assert.LessOrEqual(t, peak.Load(), int64(3))
	// The limit still admits up to 3.
	for range 3 {
		d, _ := admit(b, context.Background(), 0)
		require.True(t, d.Allowed)
	}
}

// A limit too large for an int64 ("no practical limit") is the largest one,
// not a limit of 1.
func TestHugeLimitIsNotOne(t *testing.T) {
	b, err := adaptive.NewBulkhead(math.MaxInt)
	require.NoError(t, err)
	for i := range 3 {
		d, _ := admit(b, context.Background(), 0)
		require.True(t, d.Allowed, "call %d rejected: %+v", i, d)
	}
	l, err := adaptive.NewConcurrencyLimit(adaptive.WithAlgorithm(adaptive.AIMD{InitialLimit: math.MaxInt, MaxLimit: math.MaxInt}))
	require.NoError(t, err)
	require.Equal(t, int64(math.MaxInt64), l.Stats().Limit)
}

// Zero fields take defaults that fit the fields that are set: a MaxLimit
// below the default initial limit starts there, a MinLimit above it starts
// there.
func TestDefaultLimitsYieldToTheBoundsSet(t *testing.T) {
	for _, tc := range []struct {
		a    adaptive.Algorithm
		want int64
	}{
		{adaptive.Gradient{MaxLimit: 10}, 10},
		{adaptive.Gradient{MinLimit: 50}, 50},
		{adaptive.AIMD{MaxLimit: 10}, 10},
		{adaptive.AIMD{MinLimit: 2, MaxLimit: 3}, 3},
	} {
		l, err := adaptive.NewConcurrencyLimit(adaptive.WithAlgorithm(tc.a))
		if assert.NoError(t, err, "%+v", tc.a) {
			assert.Equal(t, tc.want, l.Stats().Limit, "%+v", tc.a)
		}
	}
	_, err := adaptive.NewConcurrencyLimit(adaptive.WithAlgorithm(adaptive.AIMD{MinLimit: 5, MaxLimit: 3}))
	assert.Error(t, err, "bounds set the wrong way round are still refused")
}

// A fixed limit needs no latency: it declares no sluice.NeedsEnd, so a
// Guard of it reads the clock once a call; an adaptive limit learns from
// latencies and does. A queue Waits.
func TestFixedLimitNeedsNoEnd(t *testing.T) {
	b, err := adaptive.NewBulkhead(4)
	require.NoError(t, err)
	assert.Zero(t, b.Needs())
	f, err := adaptive.NewConcurrencyLimit(adaptive.WithAlgorithm(adaptive.Fixed{Limit: 4}))
	require.NoError(t, err)
	assert.Zero(t, f.Needs())
	g, err := adaptive.NewConcurrencyLimit()
	require.NoError(t, err)
	assert.Equal(t, sluice.NeedsEnd, g.Needs())
	q, err := adaptive.NewBulkhead(4, adaptive.WithQueue(2, ms))
	require.NoError(t, err)
	assert.Equal(t, sluice.Waits, q.Needs())
	qa, err := adaptive.NewConcurrencyLimit(adaptive.WithQueue(2, ms))
	require.NoError(t, err)
	assert.Equal(t, sluice.Waits|sluice.NeedsEnd, qa.Needs())
	lg := newTestGuard(t, adaptive.NewManualSampler(0.5, 0))
	assert.Equal(t, sluice.NeedsEnd, lg.Needs())

	d, tk := admit(b, context.Background(), sluice.Now())
	require.True(t, d.Allowed)
	b.Done(tk, sluice.Success, sluice.Now(), -1) // as a Guard that read no end instant
	assert.Zero(t, b.Stats().Inflight, "the slot is back")
}
