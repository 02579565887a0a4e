package adaptive_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/policytest"
	"github.com/sluice-go/sluice/internal/shedhook"
)

// The old Shedder counts its successor's calls (ahead): a request queued
// at the old one because the successor is full is woken when the
// successor's call ends, not left to wait out its queue and be shed.
func TestOldShedderQueueWokenBySuccessorRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		a, err := adaptive.NewBulkhead(1, adaptive.WithQueue(10, 100*ms))
		require.NoError(t, err)
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(10, 100*ms))
		require.NoError(t, err)
		shedhook.Carry(a, b)
		vb := policytest.AnswerOf(b.Admit(context.Background(), 0))
		require.NoError(t, vb.Cause)

		w := send(context.Background(), a, now) // queued at A: B's call holds the slot
		time.Sleep(ms)
		b.Done(vb.Ticket, sluice.Success, now(), ms)
		synctest.Wait()
		select {
		case got := <-w.got:
			require.True(t, got.allowed)
			require.Less(t, got.at, 10*ms)
		default:
			got := <-w.got // its wait runs out
			t.Errorf("the slot B's call freed was not handed to A's queue: allowed %v at %v", got.allowed, got.at)
		}
	})
}

// Old and new calls together stay within the limit, also after the
// predecessor drained: a call that then reaches the old Shedder (a request
// that read the old rules) is counted by the successor, which admits no
// full limit beside it.
func TestSuccessorCountsACallTheOldShedderTookAfterDraining(t *testing.T) {
	a, err := adaptive.NewBulkhead(1)
	require.NoError(t, err)
	b, err := adaptive.NewBulkhead(1)
	require.NoError(t, err)
	shedhook.Carry(a, b)
	vb := policytest.AnswerOf(b.Admit(context.Background(), 0)) // A is drained: B lets go of it
	require.NoError(t, vb.Cause)
	b.Done(vb.Ticket, sluice.Success, ms, ms)

	va := policytest.AnswerOf(a.Admit(context.Background(), 2*ms)) // a request that read the old rules
	require.NoError(t, va.Cause)
	v := policytest.AnswerOf(b.Admit(context.Background(), 3*ms))
	require.Error(t, v.Cause, "two calls ran under a limit of 1 (old %d + new %d in flight)",
		a.Stats().Inflight, b.Stats().Inflight)
}
