package sluice_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
)

// A panic in a policy's Admit after one that Waits waited releases each policy
// with the latency since its own Admit, not since the wait began.
func TestPanicAfterAWaitReleasesEachPolicyFromItsOwnAdmit(t *testing.T) {
	clk := sluice.NewManualClock(time.Second)
	outer := newRecorder("outer", 5)
	queue := &waiting{recorder: newRecorder("queue", 5), clk: clk, wait: 300 * time.Millisecond}
	middle := newRecorder("middle", 5)
	g, err := sluice.New(sluice.With(outer, queue, middle, panicky{}), sluice.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = g.Do(t.Context(), func(context.Context) error { return nil })
	}()
	got := middle.doneCalls()
	if len(got) != 1 || got[0].outcome != sluice.Released {
		t.Fatalf("middle heard %+v, want one Released", got)
	}
	// middle admitted at 1.3s (after the wait) and was released at 1.3s:
	// now - latency must be its Admit instant, 1.3s.
	if admitAt := got[0].now - got[0].latency; admitAt != middle.admits[0] {
		t.Fatalf("middle released with now %v latency %v: now-latency = %v, but it admitted at %v",
			got[0].now, got[0].latency, admitAt, middle.admits[0])
	}
}

// doneBoom is a policy whose Done panics (as a breaker's Done does when an
// state-change listener panics on the change it delivers).
type doneBoom struct{}

func (doneBoom) Name() string { return "boom" }
func (doneBoom) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 1, sluice.Quota{Limit: -1}, nil
}
func (doneBoom) Needs() sluice.Needs                                              { return 0 }
func (doneBoom) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) { panic("done") }

// A panic in an inner policy's Done does not keep the outer policies from
// hearing the end: their tickets are ended, then the panic goes on.
func TestPanicInADoneStillEndsTheOuterPolicies(t *testing.T) {
	outer := newRecorder("outer", 1)
	g, err := sluice.New(sluice.With(outer, doneBoom{}))
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = g.Do(t.Context(), func(context.Context) error { return nil })
	}()
	if n := len(outer.doneCalls()); n != 1 {
		t.Fatalf("outer admitted once and heard Done %d times; its quota is now %d (leaked)", n, outer.quota.Load())
	}
}

// A Guard of one policy whose Done panics: the panic reaches the caller,
// and the policy hears the end once (the Guard's own panic check does not
// end the call again).
func TestPanicInTheOnlyDoneReachesTheCaller(t *testing.T) {
	var dones atomic.Int32
	p := countingBoom{&dones}
	g, err := sluice.New(sluice.With(p))
	if err != nil {
		t.Fatal(err)
	}
	var got any
	func() {
		defer func() { got = recover() }()
		_ = g.Do(t.Context(), func(context.Context) error { return nil })
	}()
	if got != "done" || dones.Load() != 1 {
		t.Fatalf("recovered %v with %d Done calls; want the policy's panic after 1", got, dones.Load())
	}
}

type countingBoom struct{ n *atomic.Int32 }

func (countingBoom) Name() string { return "boom" }
func (countingBoom) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 1, sluice.Quota{Limit: -1}, nil
}
func (countingBoom) Needs() sluice.Needs { return 0 }
func (b countingBoom) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {
	b.n.Add(1)
	panic("done")
}

// The same with the library's own policies: a panicking state-change
// listener runs inside the breaker's Done, and the bulkhead outside it must
// still get its slot back.
func TestPanickingStateListenerLeaksNoBulkheadSlot(t *testing.T) {
	bh, err := adaptive.NewBulkhead(1)
	if err != nil {
		t.Fatal(err)
	}
	br, err := breaker.New("payments", breaker.WithConsecutiveFailures(1))
	if err != nil {
		t.Fatal(err)
	}
	panicked := false
	defer br.Subscribe(func(sluice.StateChange) {
		if !panicked {
			panicked = true
			panic("listener") // a bug in the user's listener, once
		}
	})()
	g, err := sluice.New(sluice.With(bh, br))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	func() {
		defer func() { _ = recover() }()
		_ = g.Do(t.Context(), func(context.Context) error { return errors.New("dependency down") })
	}()
	br.Reset()
	func() {
		defer func() { _ = recover() }()
		err = g.Do(t.Context(), func(context.Context) error { return nil })
	}()
	if errors.Is(err, sluice.ErrConcurrencyLimited) {
		t.Fatalf("the bulkhead's only slot was never given back: %v", err)
	}
}

// Close may be called from two goroutines at once: a Guard is safe for
// concurrent use, and closing twice is harmless.
func TestConcurrentCloseIsSafe(t *testing.T) {
	ev := &events{}
	g, err := sluice.New(sluice.With(newRecorder("breaker/x", -1)), sluice.WithObserver(ev))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = g.Close() }()
	}
	wg.Wait()
	if ev.detached != 1 {
		t.Fatalf("the observer was detached %d times, want once", ev.detached)
	}
}

// A nested Guard's rejection is Ignored by the outer Guard whatever its
// cause, ErrTimeout (a policy whose wait timed out) included.
func TestNestedRejectionWithTimeoutCauseIsIgnored(t *testing.T) {
	queue := newRecorder("queue", 0)
	queue.cause = sluice.ErrTimeout // its wait ran out
	inner, err := sluice.New(sluice.With(queue))
	if err != nil {
		t.Fatal(err)
	}
	outer := newRecorder("breaker", -1)
	g, err := sluice.New(sluice.With(outer))
	if err != nil {
		t.Fatal(err)
	}
	err = g.Do(t.Context(), func(ctx context.Context) error {
		return inner.Do(ctx, func(context.Context) error { return nil })
	})
	if !errors.Is(err, sluice.ErrRejected) {
		t.Fatalf("want the inner rejection, got %v", err)
	}
	if got := outer.doneCalls(); len(got) != 1 || got[0].outcome != sluice.Ignored {
		t.Fatalf("outer heard %+v for a nested Guard's rejection, want Ignored", got)
	}
}

// A nil pointer in the Policy interface is refused with an error, as a nil
// interface is, and so is a nil *ManualClock.
func TestNewRefusesANilPointerPolicy(t *testing.T) {
	var b *breaker.Breaker // e.g. the result of a failed, unchecked breaker.New
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("sluice.New panicked on a nil *breaker.Breaker: %v", r)
		}
	}()
	if _, err := sluice.New(sluice.With(b)); err == nil {
		t.Fatal("sluice.New accepted a nil *breaker.Breaker")
	}
	var c *sluice.ManualClock
	if _, err := sluice.New(sluice.WithClock(c)); err == nil {
		t.Fatal("sluice.New accepted a nil *sluice.ManualClock")
	}
}
