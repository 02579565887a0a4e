package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policytest"
)

// TestBoundaryBurst is the boundary case from the literature: a limit of 100
// per second, 100 requests at 0.99s and 100 more at 1.01s. The fixed window
// lets all 200 through within 20ms; the sliding log holds the line at 100;
// the sliding window allows what its buckets can tell apart.
func TestBoundaryBurst(t *testing.T) {
	burst := func(p sluice.Policy) int {
		admitted := 0
		for _, at := range []time.Duration{990 * ms, 1010 * ms} {
			for range 100 {
				if d, tk := admit(p, context.Background(), at); d.Allowed {
					admitted++
					p.Done(tk, sluice.Success, at, 0)
				}
			}
		}
		return admitted
	}
	fw, err := NewFixedWindow(100, time.Second)
	require.NoError(t, err)
	sl, err := NewSlidingLog(100, time.Second)
	require.NoError(t, err)
	sw10, err := NewSlidingWindow(100, time.Second, 10)
	require.NoError(t, err)
	sw1, err := NewSlidingWindow(100, time.Second, 1)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		p    sluice.Policy
		want int
	}{
		{"fixed window", fw, 200},
		{"sliding log", sl, 100},
		// The bucket holding 0.99s, [0.9s, 1s), counts until 1.9s.
		{"sliding window of 10 buckets", sw10, 100},
		// One bucket is a fixed window.
		{"sliding window of 1 bucket", sw1, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, burst(tc.p))
		})
	}
}

// TestBoundarySlidingWindowGranularity shows the sliding window's own
// boundary: with 100ms buckets, 100 requests at 0.95s leave the window at
// 1.9s, so 100 more pass at 1.91s: 200 within 0.96s, never more.
func TestBoundarySlidingWindowGranularity(t *testing.T) {
	sw, err := NewSlidingWindow(100, time.Second, 10)
	require.NoError(t, err)
	sl, err := NewSlidingLog(100, time.Second)
	require.NoError(t, err)
	count := func(allow func(time.Duration) bool, at time.Duration) int {
		n := 0
		for range 150 {
			if allow(at) {
				n++
			}
		}
		return n
	}
	assert.Equal(t, 100, count(func(now time.Duration) bool { return sw.allowNAt(now, 1) }, 950*ms))
	assert.Equal(t, 0, count(func(now time.Duration) bool { return sw.allowNAt(now, 1) }, 1899*ms))
	assert.Equal(t, 100, count(func(now time.Duration) bool { return sw.allowNAt(now, 1) }, 1910*ms))
	assert.Equal(t, 100, count(func(now time.Duration) bool { return sl.allowNAt(now, 1) }, 950*ms))
	assert.Equal(t, 0, count(func(now time.Duration) bool { return sl.allowNAt(now, 1) }, 1910*ms), "the sliding log is exact")
	assert.Equal(t, 100, count(func(now time.Duration) bool { return sl.allowNAt(now, 1) }, 1950*ms))
}

// hammer runs 64 goroutines of 500 Admits each against p on one shared
// instant that advances by step on every call, so goroutines often present
// instants out of order. About one admitted call in eight is released. It
// returns the first and last instants and the admitted units that were not
// released.
func hammer(t *testing.T, p sluice.Policy, step time.Duration) (start, end time.Duration, admitted int64) {
	t.Helper()
	const workers, calls = 64, 500
	var clock, kept atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				now := time.Duration(clock.Add(int64(step)))
				d, tk := admit(p, ctx, now)
				if !d.Allowed {
					continue
				}
				if (w+i)%8 == 0 {
					p.Done(tk, sluice.Released, now, 0)
					continue
				}
				kept.Add(1)
				p.Done(tk, sluice.Success, now, 0)
			}
		}()
	}
	wg.Wait()
	return step, time.Duration(clock.Load()), kept.Load()
}

// decidingLimiter is what every limiter of this package offers: a Policy,
// and the bare answer of Allow at an instant.
type decidingLimiter interface {
	sluice.Policy
	bareAllower
}

// assertAllocFree checks that l decides without allocating, through each of
// its paths, once warm calls have grown it to its working size. Every third
// admitted call is released.
func assertAllocFree(t *testing.T, l decidingLimiter, step time.Duration) {
	t.Helper()
	ctx := context.Background()
	var now time.Duration
	i := 0
	call := func() {
		now += step
		if d, tk := admit(l, ctx, now); d.Allowed {
			o := sluice.Success
			if i++; i%3 == 0 {
				o = sluice.Released
			}
			l.Done(tk, o, now, 0)
		}
		l.allowNAt(now, 1)
		decideAt(l, now, 2)
	}
	for range 5000 {
		call()
	}
	assert.Zero(t, testing.AllocsPerRun(1000, call))
}

// rateConformance runs the policy conformance suite on the limiters of newL.
func rateConformance(t *testing.T, newL func(t *testing.T) sluice.Policy) {
	policytest.Run(t, policytest.Config{New: newL, Causes: []error{sluice.ErrRateLimited}})
}
