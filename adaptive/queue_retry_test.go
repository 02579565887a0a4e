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

// A waiter whose caller's deadline runs out in the queue, or that a
// critical request turns out of a full queue, is rejected at the instant it
// left the queue, not the one it arrived at: its RetryAfter is about one
// latency of the calls (10 ms here), counted from then, where one counted
// from its arrival, before the calls that ended meanwhile had started, was
// the least, 1 ms, and sent its client straight back.
func TestQueuedBulkheadRetryAfterWhenTheWaitEndsEarly(t *testing.T) {
	const ms = time.Millisecond
	for _, how := range []string{"caller's deadline", "turned out"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(2, time.Second))
				require.NoError(t, err)
				admit := func(ctx context.Context, now time.Duration) chan policytest.Answer {
					res := make(chan policytest.Answer, 1)
					go func() { res <- policytest.AnswerOf(b.Admit(ctx, now)) }()
					synctest.Wait()
					return res
				}
				critical := sluice.WithPriority(context.Background(), sluice.PriorityCritical)
				held := policytest.AnswerOf(b.Admit(context.Background(), 0))
				require.NoError(t, held.Cause)
				ctx := context.Background()
				if how == "caller's deadline" {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, 100*ms)
					defer cancel()
				}
				last := admit(ctx, 2*ms)
				// Critical calls of 10 ms each go ahead of it: the first
				// starts at 10 ms, as the held one ends.
				c1 := admit(critical, 3*ms)
				b.Done(held.Ticket, sluice.Success, 10*ms, 10*ms)
				a := <-c1
				require.NoError(t, a.Cause)
				c2 := admit(critical, 11*ms)
				b.Done(a.Ticket, sluice.Success, 20*ms, 10*ms)
				a = <-c2
				require.NoError(t, a.Cause)
				if how == "turned out" {
					c3 := admit(critical, 21*ms) // the queue is full
					c4 := admit(critical, 30*ms) // and turns the normal waiter out
					v := <-last
					require.ErrorIs(t, v.Cause, sluice.ErrConcurrencyLimited)
					assert.Equal(t, 20*ms, v.RetryAfter, "turned out at 30 ms, 20 ms after the last ended call started")
					b.Done(a.Ticket, sluice.Success, 40*ms, 10*ms)
					a = <-c3
					require.NoError(t, a.Cause)
					b.Done(a.Ticket, sluice.Success, 50*ms, 10*ms)
					a = <-c4
					require.NoError(t, a.Cause)
					return
				}
				time.Sleep(200 * ms) // the caller's deadline passes at 100 ms
				v := <-last
				require.ErrorIs(t, v.Cause, sluice.ErrConcurrencyLimited)
				assert.GreaterOrEqual(t, v.RetryAfter, 10*ms, "calls take 10 ms, yet the bulkhead asks for a retry after %v", v.RetryAfter)
			})
		})
	}
}
