package ratelimit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
)

// rejecter rejects every request.
type rejecter struct{}

func (rejecter) Name() string { return "rejecter" }
func (rejecter) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1, RetryAfter: time.Second}, sluice.ErrRateLimited
}
func (rejecter) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (rejecter) Needs() sluice.Needs                                              { return 0 }

// A leaky bucket before a shaper: a request that waited in the shaper and was
// then rejected further in gives back only what had not leaked yet.
func TestLeakyBucketReleasedAfterAShapersWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		bucket, err := NewLeakyBucket(PerSecond(1), 3)
		require.NoError(t, err)
		shaper := mustShaper(t, PerSecond(1), 2*time.Second)
		require.True(t, shaper.allowNAt(0, 1), "the shaper's turn at 0 is taken: the next waits 1s")
		g, err := sluice.New(sluice.With(bucket, shaper, rejecter{}), sluice.WithClock(clk))
		require.NoError(t, err)
		defer g.Close()

		done := make(chan error, 1)
		go func() { done <- g.Do(context.Background(), func(context.Context) error { return nil }) }()
		time.Sleep(400 * time.Millisecond)
		require.True(t, bucket.allowNAt(clk.Now(), 1), "B pours in at 400ms")
		require.ErrorIs(t, <-done, sluice.ErrRateLimited)
		require.Equal(t, time.Second, clk.Now())

		// At 1s the first unit has leaked away and B's has 0.4 left: room for
		// two more units, not three.
		admitted := 0
		for range 5 {
			if bucket.allowNAt(clk.Now(), 1) {
				admitted++
			}
		}
		assert.Equal(t, 2, admitted)
	})
}

// A shaper that a policy after it rejects gives its turn back, so the next
// caller does not wait behind an empty turn.
func TestShaperReleasedInGuardGivesItsTurnBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		shaper := mustShaper(t, PerSecond(10), time.Second)
		g, err := sluice.New(sluice.With(shaper, rejecter{}), sluice.WithClock(clk))
		require.NoError(t, err)
		defer g.Close()
		time.Sleep(50 * time.Millisecond) // not at instant 0: the release must find its turn anyway
		require.ErrorIs(t, g.Do(context.Background(), func(context.Context) error { return nil }), sluice.ErrRateLimited)
		assert.True(t, shaper.allowNAt(clk.Now(), 1), "the released turn is free again")
	})
}
