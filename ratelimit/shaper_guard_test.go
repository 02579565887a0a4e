package ratelimit

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
)

// instants is a policy that admits everything and notes the instants and
// latencies it is handed.
type instants struct {
	mu        sync.Mutex
	admits    []time.Duration
	latencies []time.Duration
}

func (p *instants) Name() string { return "instants" }

func (p *instants) Admit(_ context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	p.mu.Lock()
	p.admits = append(p.admits, now)
	p.mu.Unlock()
	return 0, sluice.Quota{Limit: -1}, nil
}

// Needs returns sluice.NeedsEnd: the policy notes latencies.
func (p *instants) Needs() sluice.Needs { return sluice.NeedsEnd }

func (p *instants) Done(_ sluice.Ticket, _ sluice.Outcome, _, latency time.Duration) {
	p.mu.Lock()
	p.latencies = append(p.latencies, latency)
	p.mu.Unlock()
}

// A shaper Waits: in a Guard, the policies after it decide at
// the end of its wait, and the latency they hear is the call's own.
func TestShaperInGuardHandsTheWaitsEndOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		s := mustShaper(t, PerSecond(10), time.Second)
		assert.Equal(t, sluice.Waits, s.Needs())
		inner := &instants{}
		g, err := sluice.New(sluice.With(s, inner), sluice.WithClock(clk))
		require.NoError(t, err)
		defer g.Close()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				require.NoError(t, g.Do(context.Background(), func(context.Context) error {
					time.Sleep(10 * time.Millisecond) // fake time: the call's own work
					return nil
				}))
			})
			synctest.Wait()
		}
		wg.Wait()
		assert.Equal(t, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}, inner.admits)
		assert.Equal(t, []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}, inner.latencies)
	})
	never, err := NewShaper(PerSecond(10), 0)
	require.NoError(t, err)
	assert.Zero(t, never.Needs(), "a shaper that never waits needs nothing")
}

// Keyed Waits exactly when the limiters it makes do.
func TestKeyedOfShapersWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		k, err := NewKeyed(func(string) (sluice.Policy, error) {
			return NewShaper(PerSecond(10), time.Second)
		}, WithClock(clk))
		require.NoError(t, err)
		assert.Equal(t, sluice.Waits, k.Needs())
		inner := &instants{}
		g, err := sluice.New(sluice.With(k, inner), sluice.WithClock(clk))
		require.NoError(t, err)
		defer g.Close()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				require.NoError(t, g.Do(sluice.WithKey(context.Background(), "a"), func(context.Context) error {
					time.Sleep(10 * time.Millisecond)
					return nil
				}))
			})
			synctest.Wait()
		}
		wg.Wait()
		assert.Equal(t, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}, inner.admits)
		assert.Equal(t, []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}, inner.latencies)
	})
	buckets, err := NewKeyed(func(string) (sluice.Policy, error) { return NewTokenBucket(PerSecond(10), 5) })
	require.NoError(t, err)
	assert.Zero(t, buckets.Needs())
}

// A request whose context has ended already takes no turn.
func TestShaperAdmitWithEndedContextTakesNoTurn(t *testing.T) {
	s := mustShaper(t, PerSecond(10), time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, _ := admit(s, ctx, 0)
	require.False(t, d.Allowed)
	assert.ErrorIs(t, d.Cause, sluice.ErrRateLimited)
	assert.ErrorIs(t, d.Cause, context.Canceled)
	assert.True(t, s.allowNAt(0, 1), "the turn at 0 is still free")
}

// Every limiter with a quota reports the window the RateLimit-Policy field
// names: the time to refill its whole burst, or its window; Keyed reports
// its limiters'.
func TestLimitersReportTheirWindow(t *testing.T) {
	gcra, err := NewGCRA(PerSecond(10), 5)
	require.NoError(t, err)
	assert.Equal(t, 500*time.Millisecond, gcra.rateWindow())
	tb, err := NewTokenBucket(Rate{Count: 60, Period: time.Minute}, 30)
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, tb.rateWindow())
	require.NoError(t, tb.SetLimit(PerSecond(10), tb.Burst()))
	assert.Equal(t, 3*time.Second, tb.rateWindow(), "follows a new rate")
	lb, err := NewLeakyBucket(PerSecond(4), 8)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, lb.rateWindow())
	wu, err := NewWarmUp(PerSecond(10), 10, time.Second, 3)
	require.NoError(t, err)
	assert.Equal(t, time.Second, wu.rateWindow())
	k, err := NewKeyed(func(string) (sluice.Policy, error) { return NewSlidingWindow(5, 10*time.Second, 10) })
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, k.rateWindow())
}
