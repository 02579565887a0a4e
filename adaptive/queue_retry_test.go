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

// A queued bulkhead whose waiter runs out of time, while the calls queued
// before it took their slots and ended, answers about one latency of its
// calls (10 ms here), counted from when the wait ran out: those calls
// started after the waiter arrived.
func TestQueuedBulkheadRetryAfterAfterAWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ms = time.Millisecond
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(10, 200*ms))
		require.NoError(t, err)
		ctx := context.Background()
		held := policytest.AnswerOf(b.Admit(ctx, 0))
		require.NoError(t, held.Cause)
		res := make([]chan policytest.Answer, 3)
		for i := range res {
			res[i] = make(chan policytest.Answer, 1)
			go func() { res[i] <- policytest.AnswerOf(b.Admit(ctx, time.Duration(i+1)*ms)) }()
			synctest.Wait() // queued, in arrival order
		}
		b.Done(held.Ticket, sluice.Success, 10*ms, 10*ms) // a call of 10 ms; the first waiter takes its slot
		w1 := <-res[0]
		require.NoError(t, w1.Cause)
		b.Done(w1.Ticket, sluice.Success, 20*ms, 10*ms) // another of 10 ms, started at 10 ms; the second takes the slot
		w2 := <-res[1]
		require.NoError(t, w2.Cause)
		time.Sleep(300 * ms) // the third waiter runs out of time
		w3 := <-res[2]
		require.ErrorIs(t, w3.Cause, sluice.ErrConcurrencyLimited)
		assert.GreaterOrEqual(t, w3.RetryAfter, 10*ms, "calls take 10 ms, yet the bulkhead asks for a retry after %v", w3.RetryAfter)
		b.Done(w2.Ticket, sluice.Success, 30*ms, 10*ms)
	})
}
