package adaptive_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/policytest"
)

func TestBulkheadReconfigureRaisesAndLowersItsLimit(t *testing.T) {
	b, err := adaptive.NewBulkhead(1)
	require.NoError(t, err)
	ctx := context.Background()
	first := policytest.AnswerOf(b.Admit(ctx, 0))
	require.NoError(t, first.Cause)
	require.ErrorIs(t, policytest.AnswerOf(b.Admit(ctx, 0)).Cause, sluice.ErrConcurrencyLimited)

	require.NoError(t, b.Reconfigure(3))
	assert.Equal(t, int64(3), b.Stats().Limit)
	second, third := policytest.AnswerOf(b.Admit(ctx, 0)), policytest.AnswerOf(b.Admit(ctx, 0))
	require.NoError(t, second.Cause)
	require.NoError(t, third.Cause)
	require.Error(t, policytest.AnswerOf(b.Admit(ctx, 0)).Cause)

	// Lowered below the calls in flight: they keep their slots, and no
	// more is admitted until enough have ended.
	require.NoError(t, b.Reconfigure(1))
	b.Done(first.Ticket, sluice.Success, 0, ms)
	require.Error(t, policytest.AnswerOf(b.Admit(ctx, 0)).Cause)
	b.Done(second.Ticket, sluice.Success, 0, ms)
	b.Done(third.Ticket, sluice.Success, 0, ms)
	require.NoError(t, policytest.AnswerOf(b.Admit(ctx, 0)).Cause)
}

func TestReconfigureRefusesWhatItCannotChange(t *testing.T) {
	b, err := adaptive.NewBulkhead(2)
	require.NoError(t, err)
	for _, bad := range []func() error{
		func() error { return b.Reconfigure(0) },
		func() error { return b.Reconfigure(2, adaptive.WithQueue(4, ms)) }, // would gain a queue
		func() error { return b.Reconfigure(2, adaptive.WithName("other")) },
		func() error { return b.Reconfigure(2, adaptive.WithName("adaptive/bulkhead")) }, // only WithQueue may be given
		func() error { return b.Reconfigure(2, adaptive.WithQueue(-1, 0)) },
	} {
		require.Error(t, bad())
		assert.Equal(t, int64(2), b.Stats().Limit, "nothing changed")
	}
	s, err := adaptive.NewShedder()
	require.NoError(t, err)
	require.Error(t, s.Reconfigure(5), "a learned limit takes no number")
	require.Error(t, s.Reconfigure(0, adaptive.WithQueue(0, 0)), "would lose its queue")
	require.NoError(t, s.Reconfigure(0, adaptive.WithQueue(10, 50*ms)))
}

func TestBulkheadReconfigureHandsFreeSlotsToTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(4, time.Second))
		require.NoError(t, err)
		ctx := context.Background()
		require.NoError(t, policytest.AnswerOf(b.Admit(ctx, 0)).Cause)
		got := make(chan error, 1)
		go func() { got <- policytest.AnswerOf(b.Admit(ctx, 0)).Cause }()
		synctest.Wait()
		require.Equal(t, int64(1), b.Stats().Waiting)
		require.NoError(t, b.Reconfigure(2))
		require.NoError(t, <-got, "admitted at once, with no wait")
		require.NoError(t, b.Reconfigure(2, adaptive.WithQueue(1, time.Second)))
	})
}
