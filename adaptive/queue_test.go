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

// arrival is a request sent to a policy at an instant of a synctest bubble;
// its answer comes on got, with the instant it came.
type arrival struct {
	got chan answer
}

type answer struct {
	allowed bool
	at      time.Duration
}

func send(ctx context.Context, p sluice.Policy, now func() time.Duration) arrival {
	a := arrival{got: make(chan answer, 1)}
	at := now()
	go func() {
		v := policytest.AnswerOf(p.Admit(ctx, at))
		a.got <- answer{v.Cause == nil, now()}
	}()
	synctest.Wait()
	return a
}

// A slot that frees goes to a critical request before the others, whatever
// their order of arrival.
func TestQueueServesCriticalFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(10, 100*ms))
		require.NoError(t, err)
		ctx := context.Background()
		v := policytest.AnswerOf(b.Admit(ctx, 0))
		require.NoError(t, v.Cause)
		tk := v.Ticket
		normal := send(ctx, b, now)
		crit := send(sluice.WithPriority(ctx, sluice.PriorityCritical), b, now)
		time.Sleep(ms)
		b.Done(tk, sluice.Success, now(), ms)
		synctest.Wait()
		select {
		case a := <-crit.got:
			assert.True(t, a.allowed)
		default:
			t.Fatal("the critical request was not served first")
		}
		a := <-normal.got
		assert.False(t, a.allowed, "the slot stays taken")
		assert.Equal(t, 100*ms, a.at, "after its full wait")
	})
}

// A queue that is not overloaded serves in arrival order, however long it
// has stood: a burst at capacity is held, not turned over.
func TestQueueServesInOrderUnlessOverloaded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(10, 100*ms))
		require.NoError(t, err)
		ctx := context.Background()
		v := policytest.AnswerOf(b.Admit(ctx, 0))
		require.NoError(t, v.Cause)
		tk := v.Ticket
		first := send(ctx, b, now)
		time.Sleep(60 * ms)
		second := send(ctx, b, now)
		b.Done(tk, sluice.Success, now(), 60*ms)
		synctest.Wait()
		a := <-first.got
		assert.True(t, a.allowed, "the oldest is served first")
		a = <-second.got
		assert.False(t, a.allowed)
		assert.Equal(t, 160*ms, a.at, "after its whole wait")
	})
}

// Overloaded (more requests entering the queue than leaving it), a queue
// non-empty for an eighth of its wait serves the newest first; non-empty
// for a quarter, it gives a newcomer an eightieth of the wait, while the
// early ones keep theirs, and goes on doing so through the moment they all
// run out of time together.
func TestQueueTurnsLIFOThenShortensWaitsWhenOverloaded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(100, 100*ms))
		require.NoError(t, err)
		ctx := context.Background()
		v := policytest.AnswerOf(b.Admit(ctx, 0))
		require.NoError(t, v.Cause)
		tk := v.Ticket

		var early []arrival
		for range 12 { // 12 in, none out
			early = append(early, send(ctx, b, now))
			time.Sleep(ms)
		}
		time.Sleep(18 * ms)
		newest := send(ctx, b, now) // at 30 ms, the queue 30 ms non-empty
		b.Done(tk, sluice.Success, now(), 30*ms)
		synctest.Wait()
		a := <-newest.got
		require.True(t, a.allowed, "the newest is served first")
		assert.Equal(t, 30*ms, a.at)

		time.Sleep(60 * ms)
		standing := send(ctx, b, now) // at 90 ms
		time.Sleep(22 * ms)
		late := send(ctx, b, now) // at 112 ms, after the early ones ran out at 100-111
		a = <-early[0].got
		assert.False(t, a.allowed)
		assert.Equal(t, 100*ms, a.at, "the first keeps its whole wait")
		a = <-late.got
		assert.False(t, a.allowed)
		assert.Equal(t, 113*ms+ms/4, a.at, "still standing after it emptied")
		a = <-standing.got
		assert.False(t, a.allowed)
		assert.Equal(t, 91*ms+ms/4, a.at, "a newcomer to a standing queue waits 1.25 ms")
		for _, e := range early[1:] {
			<-e.got
		}
	})
}

func TestOptionsRejectBadInput(t *testing.T) {
	for name, opt := range map[string]adaptive.Option{
		"empty name":         adaptive.WithName(""),
		"negative size":      adaptive.WithQueue(-1, 0),
		"negative wait":      adaptive.WithQueue(1, -ms),
		"a wait but no room": adaptive.WithQueue(0, ms),
	} {
		_, err := adaptive.NewShedder(opt)
		assert.Error(t, err, name)
		_, err = adaptive.NewBulkhead(1, opt)
		assert.Error(t, err, name)
	}
	_, err := adaptive.NewBulkhead(0)
	assert.Error(t, err)
}

// busyBulkhead returns, in a synctest bubble, a bulkhead of one slot with
// a queue of size and a wait of 100 ms, its slot taken at 0 (the ticket),
// and the bubble's clock.
func busyBulkhead(t *testing.T, size int) (*adaptive.Shedder, sluice.Ticket, func() time.Duration) {
	t.Helper()
	epoch := time.Now()
	b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(size, 100*ms))
	require.NoError(t, err)
	v := policytest.AnswerOf(b.Admit(context.Background(), 0))
	require.NoError(t, v.Cause)
	return b, v.Ticket, func() time.Duration { return time.Since(epoch) }
}

// Reconfigure with WithQueue(0, 0), no queue, on a Shedder that has none
// keeps it so, as it says, and does not fail.
func TestReconfigureNoQueueOnAQueuelessShedder(t *testing.T) {
	b, err := adaptive.NewBulkhead(2)
	require.NoError(t, err)
	assert.NoError(t, b.Reconfigure(3, adaptive.WithQueue(0, 0)))
	s, err := adaptive.NewShedder(adaptive.WithQueue(0, 0))
	require.NoError(t, err)
	assert.NoError(t, s.Reconfigure(0, adaptive.WithQueue(0, 0)))
}

// A queue is standing once its oldest waiter has been late at every
// arrival for the interval: lateness noted in an earlier overload, which
// drained, does not count for a later one, whose newcomer waits its whole
// wait.
func TestStandingIsJudgedAfreshInEachOverload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, now := busyBulkhead(t, 100) // the slot stays taken
		ctx := context.Background()
		overload := func() []arrival {
			var as []arrival
			for range 12 {
				as = append(as, send(ctx, b, now))
				time.Sleep(ms)
			}
			time.Sleep(14 * ms)
			return as
		}
		first := append(overload(), send(ctx, b, now)) // its oldest is late at 26 ms
		for _, a := range first {
			<-a.got // all run out
		}
		time.Sleep(time.Second - now())
		second := overload()
		at := now()
		a := <-send(ctx, b, now).got
		assert.Equal(t, at+100*ms, a.at, "not standing: the newcomer waits its whole 100 ms")
		for _, a := range second {
			<-a.got
		}
	})
}

// A queue reconfigured to wait without bound (maxWait 0) judges no
// standing queue: one that stood before lets a newcomer wait until its
// context is done.
func TestReconfigureToNoWaitBoundEndsAStandingQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, now := busyBulkhead(t, 100)
		ctx := context.Background()
		var all []arrival
		for range 12 {
			all = append(all, send(ctx, b, now))
			time.Sleep(ms)
		}
		for _, at := range []time.Duration{30 * ms, 60 * ms, 90 * ms} {
			time.Sleep(at - now())
			all = append(all, send(ctx, b, now))
		}
		a := <-all[len(all)-1].got
		require.Equal(t, 91*ms+ms/4, a.at, "standing at 90 ms: the newcomer got 1.25 ms")
		require.NoError(t, b.Reconfigure(1, adaptive.WithQueue(100, 0)))
		wctx, cancel := context.WithTimeout(ctx, 20*ms)
		defer cancel()
		at := now()
		a = <-send(wctx, b, now).got
		assert.Equal(t, at+20*ms, a.at, "no wait bound: it waits until its context is done")
		for _, x := range all[:len(all)-1] {
			<-x.got
		}
	})
}

// Critical requests are shed last: one that finds the queue full turns out
// its newest normal waiter, which is rejected, and takes the next slot.
func TestCriticalRequestTurnsANormalOneOutOfAFullQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, taken, now := busyBulkhead(t, 1)
		ctx := context.Background()
		normal := send(ctx, b, now)
		crit := send(sluice.WithPriority(ctx, sluice.PriorityCritical), b, now)
		n := <-normal.got
		assert.False(t, n.allowed, "the normal waiter is turned out")
		assert.Equal(t, time.Duration(0), n.at, "at once")
		time.Sleep(ms)
		b.Done(taken, sluice.Success, now(), ms)
		c := <-crit.got
		assert.True(t, c.allowed, "the critical one takes the slot")
		s := b.Stats()
		assert.Zero(t, s.Waiting)
		assert.Equal(t, int64(1), s.Inflight)
		// A critical request finding the queue full of critical ones is
		// rejected, as before.
		other := send(sluice.WithPriority(ctx, sluice.PriorityCritical), b, now)
		crit2 := send(sluice.WithPriority(ctx, sluice.PriorityCritical), b, now)
		assert.False(t, (<-crit2.got).allowed)
		b.Done(sluice.Ticket(0), sluice.Success, now(), ms)
		<-other.got
	})
}

// A wait bound set by Reconfigure holds for the requests already queued
// too, counted from when each came: one queued without a bound, before the
// change, is turned away 100 ms after it came, as one queued after it.
func TestAShorterWaitHoldsForTheRequestsQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(10, 0))
		require.NoError(t, err)
		ctx := context.Background()
		v := policytest.AnswerOf(b.Admit(ctx, 0))
		require.NoError(t, v.Cause) // a long call holds the slot
		early := send(ctx, b, now)
		time.Sleep(50 * ms)
		require.NoError(t, b.Reconfigure(1, adaptive.WithQueue(10, 100*ms)))
		late := send(ctx, b, now)
		time.Sleep(time.Second)
		a := <-early.got
		assert.False(t, a.allowed)
		assert.Equal(t, 100*ms, a.at, "turned away 100 ms after it came")
		a = <-late.got
		assert.False(t, a.allowed)
		assert.Equal(t, 150*ms, a.at)
		b.Done(v.Ticket, sluice.Success, now(), now())
	})
}
