package adaptive

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/shedhook"
)

// grantRes is what a request sent to a Shedder got: its ticket, its
// error, and the instant it was answered.
type grantRes struct {
	tk  sluice.Ticket
	err error
	at  time.Duration
}

// carriedPair returns a learned Shedder with a queue, carried into a
// bulkhead of 1 whose one slot a call took at instant at, with that call's
// ticket.
func carriedPair(t *testing.T, at time.Duration) (old, nu *Shedder, ntk sluice.Ticket) {
	t.Helper()
	old, err := NewShedder(WithQueue(10, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if nu, err = NewBulkhead(1); err != nil {
		t.Fatal(err)
	}
	shedhook.Carry(old, nu)
	if ntk, _, err = nu.Admit(context.Background(), at); err != nil {
		t.Fatal(err)
	}
	return old, nu, ntk
}

// queued sends a request to s from a goroutine, inside a synctest bubble,
// and returns once it waits (or was answered): its answer comes on the
// channel.
func queued(s *Shedder, now func() time.Duration) <-chan grantRes {
	got := make(chan grantRes, 1)
	go func() {
		tk, _, err := s.Admit(context.Background(), now())
		got <- grantRes{tk, err, now()}
	}()
	synctest.Wait()
	return got
}

// A reload made a learned Shedder (with its queue) anew as a bulkhead of 1
// (a policy's kind changed): a request that read the old rules waits in the
// learned Shedder's queue. 50 ms later a reload raises the bulkhead to 3 in
// place, which wakes the waiter. The waiter's call then runs 1 ms: the
// learned limit learns 1 ms of latency, not the 50 ms it waited in the
// queue (which a grant instant taken from its arrival would feed it).
func TestARaisedBulkheadsWaiterLearnsItsCallNotItsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		old, nu, ntk := carriedPair(t, now())
		got := queued(old, now)
		if old.Stats().Waiting != 1 {
			t.Fatalf("the request did not queue at the old Shedder: %+v", old.Stats())
		}
		time.Sleep(50 * time.Millisecond)
		if err := nu.Reconfigure(3); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("not admitted: %v", r.err)
		}
		if r.at != 50*time.Millisecond {
			t.Fatalf("admitted at %v, want 50ms (woken by the raise)", r.at)
		}
		time.Sleep(time.Millisecond) // the call runs 1 ms
		old.Done(r.tk, sluice.Success, now(), time.Millisecond)
		if sum := time.Duration(old.winSum.Load()); sum > 5*time.Millisecond {
			t.Errorf("the learned Shedder sampled a latency of %v for a call of 1 ms: its 50 ms in the queue counted as service time (grant instant = arrival)", sum)
		}
		nu.Done(ntk, sluice.Success, now(), 0)
	})
}

// The sibling path: a successor bulkhead's call ends under an untimed
// Guard, which tells Done the call's start instant as now (latency -1). Its
// release wakes the learned predecessor's waiter, which learns its call's
// 1 ms, not the 40 ms it waited (the start or its arrival taken for its
// grant would feed it those).
func TestAnUntimedEndsWaiterLearnsItsCallNotItsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		start := now()
		old, nu, ntk := carriedPair(t, start)
		time.Sleep(10 * time.Millisecond)
		got := queued(old, now)
		time.Sleep(40 * time.Millisecond)
		nu.Done(ntk, sluice.Success, start, -1) // untimed Guard: now is the call's start
		r := <-got
		if r.err != nil {
			t.Fatalf("not admitted: %v", r.err)
		}
		time.Sleep(time.Millisecond)
		old.Done(r.tk, sluice.Success, now(), time.Millisecond)
		if sum := time.Duration(old.winSum.Load()); sum > 5*time.Millisecond {
			t.Errorf("the learned Shedder sampled a latency of %v for a call of 1 ms (granted at 50ms, queued at 10ms)", sum)
		}
	})
}

// A Guard reads its clock at a call's end, then tells its policies inner to
// outer: a Shedder outermost hears the end after the inner policies' Done
// have run (a Redis limiter's refund, say), with the instant read before.
// A request that arrived meanwhile and queued is granted the freed slot: it
// is not taken to hold it from before it arrived, or the learned limit
// would learn the gap as latency of its call.
func TestAGrantIsNeverBeforeTheWaiterCame(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		s, err := NewShedder(WithQueue(10, 100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		s.limit.Store(1)
		ta, _, err := s.Admit(context.Background(), now())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		endA := now() // the Guard reads the end of A's call at 10ms
		time.Sleep(10 * time.Millisecond)

		arrived := now() // 20ms
		got := queued(s, now)
		if s.Stats().Waiting != 1 {
			t.Fatalf("B did not queue: %+v", s.Stats())
		}
		// The inner policies' Done done, the Shedder hears A's end.
		s.Done(ta, sluice.Success, endA, endA)
		r := <-got
		if r.err != nil {
			t.Fatalf("B not admitted: %v", r.err)
		}
		grant := time.Duration(uint64(r.tk) & (1<<ticketBits - 1))
		if grant < arrived {
			t.Errorf("B's ticket says it held its slot from %v, before it arrived at %v", grant, arrived)
		}
		before := time.Duration(s.winSum.Load())
		time.Sleep(time.Millisecond) // B's call runs 1 ms
		s.Done(r.tk, sluice.Success, now(), time.Millisecond)
		if d := time.Duration(s.winSum.Load()) - before; d > 2*time.Millisecond {
			t.Errorf("the learned limit sampled %v for B's call of 1 ms", d)
		}
	})
}
