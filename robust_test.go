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

// oneSlot is a one-slot bulkhead: it admits while its slot is free, and
// Done gives the slot back.
type oneSlot struct {
	name  string
	held  atomic.Int32
	cause error
}

func (p *oneSlot) Name() string { return p.name }
func (p *oneSlot) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if !p.held.CompareAndSwap(0, 1) {
		c := p.cause
		if c == nil {
			c = sluice.ErrConcurrencyLimited
		}
		return 0, sluice.Quota{Limit: -1, RetryAfter: time.Millisecond}, c
	}
	return 1, sluice.Quota{Limit: -1}, nil
}
func (p *oneSlot) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) { p.held.Store(0) }
func (p *oneSlot) Needs() sluice.Needs                                              { return 0 }

type nopObserver struct{}

func (nopObserver) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return func(context.Context, sluice.CallEvent) {}, nil, nil
}

// An adapter that classifies a call itself hands Report an Outcome; one
// outside the four (a bad cast of a status table, say) counts as a
// Failure: no panic in the Guard's counters after the call was marked
// ended, which left the policy's slot taken for good.
func TestReportWithAnOutcomeOutsideTheFourCountsAFailure(t *testing.T) {
	p := &oneSlot{name: "slot"}
	g, err := sluice.New(sluice.With(p), sluice.WithObserver(nopObserver{}))
	if err != nil {
		t.Fatal(err)
	}
	var c sluice.Call
	if err := g.Begin(context.Background(), &c); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("Report(Outcome(200)) panicked: %v", r)
			}
		}()
		c.Report(sluice.Outcome(200), errors.New("boom"))
	}()
	if p.held.Load() != 0 {
		t.Errorf("the policy never heard the call's end: its slot is held for good")
	}
	// And the next call through the Guard is turned away forever.
	if err := g.Do(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Errorf("next call: %v", err)
	}
}

// A Classifier is a user function; one returning an Outcome past Released
// made the observed Guard count the admitted call as a rejection by its
// policy (the slot index ran into the rejection counters): it counts as a
// Failure.
func TestAClassifierOutcomeOutsideTheFourCountsAFailure(t *testing.T) {
	p := &oneSlot{name: "slot"}
	g, err := sluice.New(sluice.With(p), sluice.WithObserver(nopObserver{}),
		sluice.WithClassifier(func(error) sluice.Outcome { return sluice.Released + 2 }))
	if err != nil {
		t.Fatal(err)
	}
	_ = g.Do(context.Background(), func(context.Context) error { return errors.New("boom") })
	ps := g.Stats().Policies[0]
	var rejected uint64
	for _, n := range ps.Rejected {
		rejected += n
	}
	var ended uint64
	for _, n := range ps.Outcomes {
		ended += n
	}
	if rejected != 0 || ended != 1 {
		t.Errorf("one admitted call that ended: Stats say rejected %v, outcomes %v", ps.Rejected, ps.Outcomes)
	}
}

// namedCause is a rejection cause of a comparable type (an interface field)
// that wraps a sentinel through a value of a type that cannot be compared.
type namedCause struct{ inner error }

func (e namedCause) Error() string { return "limit reached" }
func (e namedCause) Unwrap() error { return e.inner }

type causes struct{ errs []error }

func (causes) Error() string     { return "multi" }
func (m causes) Unwrap() []error { return m.errs }

// The Guard keeps one rejection error per policy and compares the next
// cause with the kept one: a cause of a comparable type whose field holds
// an uncomparable value is never kept, nor compared.
func TestAnUncomparableCauseRejectsTwiceWithoutPanic(t *testing.T) {
	p := &oneSlot{name: "slot", cause: namedCause{inner: causes{[]error{sluice.ErrRateLimited}}}}
	p.held.Store(1) // full: every call is rejected
	g, err := sluice.New(sluice.With(p))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("rejection %d panicked: %v", i+1, r)
				}
			}()
			err := g.Do(context.Background(), func(context.Context) error { return nil })
			if !errors.Is(err, sluice.ErrRateLimited) {
				t.Errorf("rejection %d: %v", i+1, err)
			}
		}()
	}
}
