package adaptive_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/policytest"
	"github.com/sluice-go/sluice/internal/shedhook"
)

// Three reloads in a row, A -> B -> C, while A's call is still in flight:
// C counts A's call against its limit (through B), so a request queued at
// C must be woken when A's call ends, not wait out its queue and be shed.
func TestACarryChainOfThreeWakesTheLastQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		a, err := adaptive.NewBulkhead(1)
		require.NoError(t, err)
		va := policytest.AnswerOf(a.Admit(context.Background(), 0))
		require.NoError(t, va.Cause)
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(10, 100*ms))
		require.NoError(t, err)
		shedhook.Carry(a, b)
		c, err := adaptive.NewBulkhead(1, adaptive.WithQueue(10, 100*ms))
		require.NoError(t, err)
		shedhook.Carry(b, c)

		w := send(context.Background(), c, now) // queued: A's call holds C's slot
		time.Sleep(ms)
		a.Done(va.Ticket, sluice.Success, now(), ms)
		synctest.Wait()
		select {
		case got := <-w.got:
			require.True(t, got.allowed)
			require.Less(t, got.at, 10*ms, "granted only when its wait ran out")
		default:
			t.Error("the slot A's call freed was not handed to C's queue")
			got := <-w.got // its wait runs out
			t.Logf("C's queued request: allowed %v at %v", got.allowed, got.at)
		}
	})
}

// A call that reaches the old Shedder after the carry (a request that read
// the old rules, a Guard kept from Loader.Guard) must not run beside a
// full successor: the old and new calls together stay within the limit.
func TestAnOldShedderAdmitsNothingBesideAFullSuccessor(t *testing.T) {
	a, err := adaptive.NewBulkhead(2)
	require.NoError(t, err)
	b, err := adaptive.NewBulkhead(2, adaptive.WithQueue(10, 100*ms))
	require.NoError(t, err)
	shedhook.Carry(a, b)
	for range 2 {
		require.NoError(t, policytest.AnswerOf(b.Admit(context.Background(), 0)).Cause)
	}
	v := policytest.AnswerOf(a.Admit(context.Background(), 0))
	require.Error(t, v.Cause, "a third call ran beside two under a limit of 2 (old %d + new %d in flight)",
		a.Stats().Inflight, b.Stats().Inflight)
}

// A learned-limit Shedder made anew while its predecessor's calls run:
// those calls hold its slots, so they are in use when a window ends. With
// 19 carried and one of its own, latency doubling should cut the limit
// from the 20 in use (to about 10), not from its own 1 to the floor.
func TestALearnedWindowCountsTheCarriedCallsInUse(t *testing.T) {
	a, err := adaptive.NewShedder(adaptive.WithQueue(0, 0))
	require.NoError(t, err)
	for range 19 {
		require.NoError(t, policytest.AnswerOf(a.Admit(context.Background(), 0)).Cause)
	}
	b, err := adaptive.NewShedder(adaptive.WithQueue(0, 0))
	require.NoError(t, err)
	require.EqualValues(t, 20, b.Stats().Limit)
	shedhook.Carry(a, b)
	call := func(at, lat time.Duration) {
		v := policytest.AnswerOf(b.Admit(context.Background(), at))
		require.NoError(t, v.Cause, "at %v", at)
		b.Done(v.Ticket, sluice.Success, at+lat, lat)
	}
	for i := range 10 { // window 1: 10 ms, the baseline
		call(time.Duration(i)*ms, 10*ms)
	}
	for i := range 11 { // window 2: 20 ms, latency doubled
		call(100*ms+time.Duration(i)*ms, 20*ms)
	}
	call(220*ms, 20*ms) // ends window 2
	require.GreaterOrEqual(t, b.Stats().Limit, int64(10),
		"the limit was cut from the Shedder's own calls in flight, not the 20 in use")
}

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

// A call still in flight in a bulkhead made five reloads ago holds a slot
// of the one in force: the chain is cut past maxCarried only where no call
// runs, so the newest bulkhead admits no full limit beside the old call.
func TestACallInFlightFiveReloadsAgoStillHoldsItsSlot(t *testing.T) {
	var chain []*adaptive.Shedder
	for range 6 {
		s, err := adaptive.NewBulkhead(1)
		require.NoError(t, err)
		chain = append(chain, s)
	}
	v0 := policytest.AnswerOf(chain[0].Admit(context.Background(), 0)) // a long call: a stream, say
	require.NoError(t, v0.Cause)
	for i := 1; i < len(chain); i++ {
		shedhook.Carry(chain[i-1], chain[i]) // five quick reloads
	}
	v := policytest.AnswerOf(chain[5].Admit(context.Background(), ms))
	require.Error(t, v.Cause, "two calls ran under a limit of 1: the oldest bulkhead's call was let go while in flight (%d)",
		chain[0].Stats().Inflight)
}

// S0 serves a long call (a stream); S1 took its place, and a request that
// read the old rules waits in S1's queue, because S5, in force, is full
// (S1 counts S0's call and S5's). Past maxCarried, S1, with no call of its
// own in flight but a waiter, is not skipped from the carry chain: when
// S5's call ends, the slot it frees wakes S1's waiter.
func TestAWaitingPredecessorsQueueIsWoken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		mk := func() *adaptive.Shedder {
			s, err := adaptive.NewBulkhead(2, adaptive.WithQueue(10, 100*ms))
			require.NoError(t, err)
			return s
		}
		s := []*adaptive.Shedder{mk()}
		v0 := policytest.AnswerOf(s[0].Admit(context.Background(), 0)) // the stream, held
		require.NoError(t, v0.Cause)
		for i := 1; i <= 5; i++ {
			s = append(s, mk())
			shedhook.Carry(s[i-1], s[i])
		}
		v5 := policytest.AnswerOf(s[5].Admit(context.Background(), 0))
		require.NoError(t, v5.Cause)
		w := send(context.Background(), s[1], now) // queued: S0's call and S5's hold S1's two slots
		s = append(s, mk())
		shedhook.Carry(s[5], s[6]) // S1, idle, is past maxCarried
		time.Sleep(ms)
		s[5].Done(v5.Ticket, sluice.Success, now(), ms)
		synctest.Wait()
		select {
		case got := <-w.got:
			require.True(t, got.allowed)
			require.Less(t, got.at, 10*ms, "granted only when its wait ran out")
		default:
			got := <-w.got // its wait runs out
			t.Errorf("the slot S5's call freed was not handed to S1's queue: allowed %v at %v", got.allowed, got.at)
		}
		s[0].Done(v0.Ticket, sluice.Success, now(), ms)
	})
}

// After a rules reload made a bulkhead of 1 anew (shedhook.Carry, as rules
// does), requests that still reach the old one and those reaching the new
// one together never run more than 1 at once, however they race for the
// last slot.
func TestCarriedBulkheadsTogetherKeepTheLimitUnderRaces(t *testing.T) {
	old, err := adaptive.NewBulkhead(1)
	if err != nil {
		t.Fatal(err)
	}
	nu, err := adaptive.NewBulkhead(1)
	if err != nil {
		t.Fatal(err)
	}
	shedhook.Carry(old, nu)
	var running, maxRunning atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := 0; w < 8; w++ {
		s := old
		if w%2 == 1 {
			s = nu
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < 20000 && maxRunning.Load() <= 1; i++ {
				tk, _, err := s.Admit(context.Background(), time.Duration(i))
				if err != nil {
					continue
				}
				n := running.Add(1)
				for {
					m := maxRunning.Load()
					if n <= m || maxRunning.CompareAndSwap(m, n) {
						break
					}
				}
				running.Add(-1)
				s.Done(tk, sluice.Success, time.Duration(i), 0)
			}
		}()
	}
	close(start)
	wg.Wait()
	if m := maxRunning.Load(); m > 1 {
		t.Fatalf("old and new bulkhead of 1 (carried) ran %d calls at once", m)
	}
}

// A bulkhead made anew with a queue by a reload (shedhook.Carry, as rules
// does) beside its old one: a slot taken under the queue's lock that does
// not hold (the old one's call took its slot meanwhile) is given back, and
// the waiters woken, without locking the queue again: every worker goes on.
func TestAQueuedCarriedBulkheadRaceDoesNotDeadlock(t *testing.T) {
	old, err := adaptive.NewBulkhead(1)
	if err != nil {
		t.Fatal(err)
	}
	nu, err := adaptive.NewBulkhead(1, adaptive.WithQueue(64, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	shedhook.Carry(old, nu)
	var stop atomic.Bool
	var progress [8]atomic.Int64
	for w := 0; w < 8; w++ {
		s := old
		if w == 0 {
			s = nu
		}
		go func() {
			for i := 0; !stop.Load(); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				tk, _, err := s.Admit(ctx, time.Duration(i))
				cancel()
				if err == nil {
					s.Done(tk, sluice.Success, time.Duration(i), 0)
				}
				progress[w].Add(1)
			}
		}()
	}
	defer stop.Store(true)
	var last [8]int64
	var still [8]int
	for range 32 { // at most 8 s
		time.Sleep(250 * time.Millisecond)
		for w := range progress {
			p := progress[w].Load()
			if still[w]++; p != last[w] {
				still[w] = 0
			}
			if still[w] == 4 {
				buf := make([]byte, 1<<16)
				buf = buf[:runtime.Stack(buf, true)]
				t.Fatalf("worker %d made no progress in 1 s: Admit/Done hung on the queue's lock\n%s", w, buf)
			}
			last[w] = p
		}
	}
}

// A request that still reaches an old bulkhead (it read the rules before a
// reload lowered the limit) runs under the new limit: beside a full
// successor, the old bulkhead of 10 admits none.
func TestACarriedBulkheadRunsUnderItsSuccessorsLimit(t *testing.T) {
	a, err := adaptive.NewBulkhead(10)
	require.NoError(t, err)
	b, err := adaptive.NewBulkhead(2, adaptive.WithQueue(10, 100*time.Millisecond))
	require.NoError(t, err)
	shedhook.Carry(a, b)
	for range 2 {
		require.NoError(t, policytest.AnswerOf(b.Admit(context.Background(), 0)).Cause)
	}
	admitted := 0
	for range 8 {
		if policytest.AnswerOf(a.Admit(context.Background(), 0)).Cause == nil {
			admitted++
		}
	}
	require.Zero(t, admitted, "admitted by the old bulkhead of 10 beside a full successor of 2")
	require.Equal(t, int64(2), b.Stats().Inflight)
}

// The calls of the Shedder a reload replaced hold the new one's slots, and
// its Stats count them: a bulkhead that rejects for a full limit does not
// show an empty one.
func TestStatsCountTheCarriedCalls(t *testing.T) {
	a, err := adaptive.NewBulkhead(1)
	require.NoError(t, err)
	require.NoError(t, policytest.AnswerOf(a.Admit(context.Background(), 0)).Cause)
	b, err := adaptive.NewBulkhead(1)
	require.NoError(t, err)
	shedhook.Carry(a, b)
	require.Error(t, policytest.AnswerOf(b.Admit(context.Background(), 0)).Cause, "the carried call holds the only slot")
	require.Equal(t, int64(1), b.Stats().Inflight)
	require.Equal(t, int64(1), a.Stats().Inflight)
}

// An old bulkhead of 10 admits within its successor's limit of 2, and its
// Stats say so: 2 of 2 in flight, not 2 of 10, while it rejects.
func TestACarriedBulkheadsStatsShowTheLimitItAdmitsWithin(t *testing.T) {
	a, err := adaptive.NewBulkhead(10)
	if err != nil {
		t.Fatal(err)
	}
	b, err := adaptive.NewBulkhead(2)
	if err != nil {
		t.Fatal(err)
	}
	shedhook.Carry(a, b)
	ctx := context.Background()
	for range 2 {
		if v := policytest.AnswerOf(b.Admit(ctx, 0)); v.Cause != nil {
			t.Fatal(v.Cause)
		}
	}
	if v := policytest.AnswerOf(a.Admit(ctx, 0)); v.Cause == nil {
		t.Fatal("the old bulkhead admitted beside a full successor")
	}
	if st := a.Stats(); st.Inflight < st.Limit {
		t.Fatalf("the old bulkhead rejects for a full limit but its Stats show %d of %d in flight", st.Inflight, st.Limit)
	}
}

// A reload made a bulkhead of 5 with a queue anew as a bulkhead of 1
// (carried); a request that read the old rules waits in the old queue, the
// successor's one call holding the only slot. A later reload raises the
// successor's limit to 3 in place, which hands the free slots to the old
// queue's waiter at once, not once its wait ran out.
func TestARaisedSuccessorWakesAPredecessorsWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		old, err := adaptive.NewBulkhead(5, adaptive.WithQueue(10, 100*ms))
		require.NoError(t, err)
		nu, err := adaptive.NewBulkhead(1)
		require.NoError(t, err)
		shedhook.Carry(old, nu)
		v := policytest.AnswerOf(nu.Admit(context.Background(), 0))
		require.NoError(t, v.Cause)

		ctx := context.Background()
		w := arrival{got: make(chan answer, 1)}
		var tk sluice.Ticket
		go func() { // queued: nu's call fills min(5, 1)
			v := policytest.AnswerOf(old.Admit(ctx, now()))
			tk = v.Ticket
			w.got <- answer{v.Cause == nil, now()}
		}()
		synctest.Wait()
		select {
		case got := <-w.got:
			t.Fatalf("not queued: allowed %v", got.allowed)
		default:
		}
		require.NoError(t, nu.Reconfigure(3))
		synctest.Wait()
		select {
		case got := <-w.got:
			require.True(t, got.allowed)
			old.Done(tk, sluice.Success, now(), 0)
		default:
			got := <-w.got
			t.Errorf("the old queue's waiter was not woken by the successor's raise: allowed %v at %v (1 of 3 slots in flight)", got.allowed, got.at)
		}
		nu.Done(v.Ticket, sluice.Success, now(), 0)
	})
}
