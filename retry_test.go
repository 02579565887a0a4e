package sluice_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/retrytest"
	"github.com/sluice-go/sluice/ratelimit"
)

var errDown = errors.New("dependency down")

func TestWithRetryRefusesBadDeclarations(t *testing.T) {
	for name, r := range map[string]sluice.Retry{
		"one attempt":          {Attempts: 1},
		"negative attempts":    {Attempts: -2},
		"negative backoff":     {Backoff: -time.Millisecond},
		"negative max backoff": {MaxBackoff: -time.Millisecond},
		"max below backoff":    {Backoff: time.Second, MaxBackoff: time.Millisecond},
		"budget above 1":       {Budget: 1.5},
		"negative budget":      {Budget: -0.1},
		"negative floor":       {MinPerSecond: -1},
	} {
		_, err := sluice.New(sluice.WithRetry(r))
		assert.Error(t, err, name)
	}
	g, err := sluice.New(sluice.WithRetry(sluice.Retry{}))
	require.NoError(t, err)
	require.NoError(t, g.Close())
}

// retryGuard is a Guard on a clock of the bubble that retries as r says.
func retryGuard(t *testing.T, r sluice.Retry, opts ...sluice.Option) *sluice.Guard {
	t.Helper()
	g, err := sluice.New(append([]sluice.Option{sluice.WithRetry(r)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func TestRetryTriesAFailedCallAgainUntilItSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := retryGuard(t, sluice.Retry{Attempts: 3, MinPerSecond: 5})
		n := 0
		v, err := sluice.Execute(context.Background(), g, func(context.Context) (int, error) {
			n++
			if n < 3 {
				return 0, errDown
			}
			return 42, nil
		})
		require.NoError(t, err)
		assert.Equal(t, 42, v)
		assert.Equal(t, 3, n)
		s := g.Stats()
		assert.Equal(t, uint64(3), s.Attempts)
		assert.Equal(t, uint64(2), s.Retries)
		assert.Zero(t, s.BudgetRefusals)

		// Attempts bounds the tries; the last error is the caller's.
		n = 0
		err = g.Do(context.Background(), func(context.Context) error { n++; return errDown })
		assert.ErrorIs(t, err, errDown)
		assert.Equal(t, 3, n)
	})
}

// The delay before retry k is drawn uniformly from [0, Backoff·2^(k-1)],
// capped at MaxBackoff: every delay is within its bound, and the delays
// spread over it rather than bunch.
func TestRetryBackoffIsBoundedAndJittered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const base, ceil = 100 * time.Millisecond, 300 * time.Millisecond
		g := retryGuard(t, sluice.Retry{Attempts: 4, Backoff: base, MaxBackoff: ceil, Budget: 1, MinPerSecond: 1000})
		bounds := []time.Duration{base, 2 * base, ceil}
		const calls = 400
		delays := make([][]time.Duration, len(bounds))
		for range calls {
			var last time.Time
			k := 0
			_ = g.Do(context.Background(), func(context.Context) error {
				if k > 0 {
					delays[k-1] = append(delays[k-1], time.Since(last))
				}
				last = time.Now()
				k++
				return errDown
			})
			require.Equal(t, 4, k)
			time.Sleep(time.Second) // the floor refills the budget
		}
		for i, ds := range delays {
			require.Len(t, ds, calls)
			lo, hi := ds[0], ds[0]
			var sum time.Duration
			for _, d := range ds {
				require.LessOrEqual(t, d, bounds[i], "retry %d waited past its bound", i+1)
				lo, hi, sum = min(lo, d), max(hi, d), sum+d
			}
			assert.Less(t, lo, bounds[i]/10, "retry %d: no short delay drawn", i+1)
			assert.Greater(t, hi, bounds[i]*9/10, "retry %d: no long delay drawn", i+1)
			mean := sum / calls
			assert.InDelta(t, float64(bounds[i]/2), float64(mean), float64(bounds[i]/10), "retry %d: the mean is not half the bound", i+1)
		}
	})
}

// One deadline spans every attempt: no attempt starts that, taking as long
// as the last did, could not end before it, and the failure is returned as
// soon as that is so, rather than when the deadline comes.
func TestRetryStopsAtTheCallersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const took = 20 * time.Millisecond
		g := retryGuard(t, sluice.Retry{Attempts: 10, Backoff: 40 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Budget: 1, MinPerSecond: 100})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		dl, _ := ctx.Deadline()
		var starts []time.Time
		err := g.Do(ctx, func(context.Context) error {
			starts = append(starts, time.Now())
			time.Sleep(took) // an attempt that does not heed its context
			return errDown
		})
		assert.ErrorIs(t, err, errDown)
		assert.GreaterOrEqual(t, len(starts), 2, "no retry within a deadline that left room for one")
		for _, s := range starts {
			assert.False(t, s.Add(took).After(dl), "an attempt started %v before the deadline, too late to end", dl.Sub(s))
		}
		assert.True(t, time.Now().Before(dl), "the call waited for a retry it could not make")

		// An attempt that took most of the time leaves none for another.
		ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start, n := time.Now(), 0
		err = g.Do(ctx, func(context.Context) error { n++; time.Sleep(60 * time.Millisecond); return errDown })
		assert.ErrorIs(t, err, errDown)
		assert.Equal(t, 1, n, "retried with 40ms left for a 60ms attempt")
		assert.Equal(t, 60*time.Millisecond, time.Since(start))
	})
}

// Retries never follow a rejection by the Guard's own policies, nor a
// cancelled call, nor an error the Classifier does not count as a failure.
func TestRetryNeverFollowsARejectionOrACancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limit, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1)
		require.NoError(t, err)
		g := retryGuard(t, sluice.Retry{Budget: 1, MinPerSecond: 100}, sluice.With(limit))
		ran := 0
		err = g.Do(context.Background(), func(context.Context) error { ran++; return errDown })
		// The first attempt took the only token: the retry is rejected by
		// the Guard's own limiter, and that ends the call.
		assert.ErrorIs(t, err, sluice.ErrRateLimited)
		assert.Equal(t, 1, ran)
		assert.Equal(t, uint64(2), g.Stats().Attempts)

		g = retryGuard(t, sluice.Retry{Budget: 1, MinPerSecond: 100})
		ctx, cancel := context.WithCancel(context.Background())
		ran = 0
		err = g.Do(ctx, func(context.Context) error { ran++; cancel(); return errDown })
		assert.ErrorIs(t, err, errDown)
		assert.Equal(t, 1, ran, "a cancelled call was tried again")

		ran = 0
		err = g.Do(context.Background(), func(context.Context) error { ran++; return context.Canceled })
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 1, ran, "an ignored error was tried again")
	})
}

// Each attempt is one call for a breaker: a breaker that opens on an
// attempt's failure rejects the next attempt, which ends the call; the
// fallback, outermost, answers that last error.
func TestRetryEndsWhenTheBreakerOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := breaker.New("dep", breaker.WithConsecutiveFailures(2))
		require.NoError(t, err)
		fb, err := degrade.New(degrade.OnRejected(degrade.Value("cached")))
		require.NoError(t, err)
		g := retryGuard(t, sluice.Retry{Attempts: 5, Budget: 1, MinPerSecond: 100}, sluice.With(b), sluice.WithFallback(fb))
		ran := 0
		v, err := sluice.Execute(context.Background(), g, func(context.Context) (string, error) { ran++; return "", errDown })
		require.NoError(t, err)
		assert.Equal(t, "cached", v, "the fallback did not answer the open breaker's rejection")
		assert.Equal(t, 2, ran, "attempts went on past the breaker's opening")
		assert.Equal(t, breaker.StateOpen, b.State())
	})
}

// The budget holds under 64 callers against a dependency that always
// fails: retries add at most Budget of the calls, plus the floor for the
// time passed and the savings it starts with.
func TestRetryBudgetHoldsUnderConcurrentFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const floor, ratio = 2.0, 0.1
		g := retryGuard(t, sluice.Retry{Attempts: 3, Backoff: time.Millisecond, MaxBackoff: time.Millisecond, Budget: ratio, MinPerSecond: floor})
		var attempts atomic.Int64
		retrytest.Storm(t, 50, ratio, floor, func() {
			_ = g.Do(context.Background(), func(context.Context) error {
				attempts.Add(1)
				time.Sleep(10 * time.Millisecond)
				return errDown
			})
		}, func() int { return int(attempts.Load()) })
		s := g.Stats()
		assert.Equal(t, uint64(attempts.Load()), s.Attempts)
		assert.Equal(t, s.Attempts-64*50, s.Retries)
		assert.Positive(t, s.BudgetRefusals)
	})
}

func TestRetryDelayHonoursTheMinimumAskedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := retryGuard(t, sluice.Retry{Backoff: time.Millisecond, MaxBackoff: time.Second, Budget: 1, MinPerSecond: 100})
		ctx := context.Background()
		for range 20 {
			d, ok := guardhook.RetryDelay(g, ctx, 1, time.Time{}, 700*time.Millisecond)
			require.True(t, ok)
			assert.GreaterOrEqual(t, d, 700*time.Millisecond)
		}
		_, ok := guardhook.RetryDelay(g, ctx, 1, time.Time{}, 2*time.Second)
		assert.False(t, ok, "a delay past MaxBackoff was granted")
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, ok = guardhook.RetryDelay(g, short, 1, time.Time{}, 700*time.Millisecond)
		assert.False(t, ok, "a delay past the deadline was granted")
		_, ok = guardhook.RetryDelay(g, ctx, 3, time.Time{}, 0)
		assert.False(t, ok, "a fourth attempt was granted of three")

		var none *sluice.Guard
		_, ok = guardhook.RetryDelay(none, ctx, 1, time.Time{}, 0)
		assert.False(t, ok)
	})
}

// A Guard that declares retries allocates nothing on a call it admits and
// that succeeds, nor on one its open breaker rejects, by Do or Execute.
func TestRetryGuardAllocatesNothingOnAdmitAndReject(t *testing.T) {
	ctx := context.Background()
	b, err := breaker.New("dep", breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(time.Hour))
	require.NoError(t, err)
	open := retryGuard(t, sluice.Retry{}, sluice.With(b))
	_ = open.Do(ctx, func(context.Context) error { return errDown })
	require.ErrorIs(t, open.Do(ctx, nop), sluice.ErrCircuitOpen)
	ok := retryGuard(t, sluice.Retry{}, sluice.With(nopPolicy{}))
	value := func(context.Context) (int, error) { return 1, nil }
	for name, g := range map[string]*sluice.Guard{"admit": ok, "reject": open} {
		assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = g.Do(ctx, nop) }), "%s: Do allocates", name)
		assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = sluice.Execute(ctx, g, value) }), "%s: Execute allocates", name)
	}
}

// Bounds near the largest Duration do not overflow as they double: a
// retry is refused for the deadline, not by a panic.
func TestRetryDelayOfHugeBackoffs(t *testing.T) {
	g := retryGuard(t, sluice.Retry{Attempts: 5, Backoff: 1 << 62, MaxBackoff: math.MaxInt64, Budget: 1, MinPerSecond: 100})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for n := 1; n < 5; n++ {
		d, ok := guardhook.RetryDelay(g, ctx, n, time.Time{}, 0)
		assert.GreaterOrEqual(t, d, time.Duration(0), "retry %d", n)
		_ = ok // an hour is most likely too short, but may not be
	}
}

// A Retry that sets only Backoff, longer than MaxBackoff's default, takes
// a MaxBackoff that fits it: the zero value of a field takes its default,
// and is no error.
func TestRetryBackoffAboveTheDefaultMaxBackoff(t *testing.T) {
	g, err := sluice.New(sluice.WithRetry(sluice.Retry{Backoff: 3 * time.Second}))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	_, err = sluice.New(sluice.WithRetry(sluice.Retry{Backoff: 3 * time.Second, MaxBackoff: 2 * time.Second}))
	assert.ErrorContains(t, err, "MaxBackoff 2s is below Backoff 3s")
}
