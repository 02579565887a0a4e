package adaptive_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/policytest"
)

// A request whose caller goes away while it waits in the queue, or is gone
// when it comes, is no shed: its answer says the context was canceled,
// and the Shedder stays normal. A deadline that runs out in the queue is a
// shed.
func TestACallerGoneWhileQueuedIsNoShed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, now := busyBulkhead(t, 10) // the slot stays taken
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			done <- policytest.AnswerOf(b.Admit(ctx, now())).Cause
		}()
		time.Sleep(10 * ms)
		cancel()
		err := <-done
		require.Error(t, err)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, sluice.ErrConcurrencyLimited, "still a rejection of the bulkhead")
		assert.Equal(t, adaptive.StateNormal, b.Stats().State)

		gone, stop := context.WithCancel(context.Background())
		stop()
		err = policytest.AnswerOf(b.Admit(gone, now())).Cause
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, adaptive.StateNormal, b.Stats().State)

		// A deadline that runs out in the queue is a shed: no slot came in
		// time.
		late, stop := context.WithTimeout(context.Background(), 10*ms)
		defer stop()
		err = policytest.AnswerOf(b.Admit(late, now())).Cause
		assert.ErrorIs(t, err, sluice.ErrConcurrencyLimited)
		assert.Equal(t, adaptive.StateShedding, b.Stats().State)

		// A wait that runs out is a shed.
		err = policytest.AnswerOf(b.Admit(context.Background(), now())).Cause
		assert.ErrorIs(t, err, sluice.ErrConcurrencyLimited)
		assert.False(t, errors.Is(err, context.Canceled))
		assert.Equal(t, adaptive.StateShedding, b.Stats().State)
	})
}
