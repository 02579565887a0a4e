package sluice_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
)

// events is an Observer that keeps what it hears.
type events struct {
	mu       sync.Mutex
	got      []sluice.CallEvent
	attached []*sluice.Guard
	detached int
	fail     error
}

func (e *events) Attach(g *sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	if e.fail != nil {
		return nil, nil, e.fail
	}
	e.attached = append(e.attached, g)
	return e.observe, func() { e.detached++ }, nil
}

func (e *events) observe(_ context.Context, ev sluice.CallEvent) {
	e.mu.Lock()
	e.got = append(e.got, ev)
	e.mu.Unlock()
}

func TestObservedGuardCountsEachPolicysDecisionsAndOutcomes(t *testing.T) {
	clk := sluice.NewManualClock(time.Second)
	outer := newRecorder("outer", -1)
	inner := newRecorder("inner", 3) // admits 3, then rejects: rate limited
	ev := &events{}
	fb := sluice.WithFallback(fbFunc[int]{name: "rate-limited", fn: func(_ context.Context, err error) (int, error) {
		if errors.Is(err, sluice.ErrRateLimited) {
			return 0, nil
		}
		return 0, err
	}})
	g := mustGuard(t, sluice.WithName("payments"), sluice.With(outer, inner), sluice.WithClock(clk),
		sluice.WithObserver(ev), fb)
	require.Equal(t, []*sluice.Guard{g}, ev.attached)

	boom := errors.New("boom")
	results := []error{nil, boom, context.Canceled}
	for _, want := range results {
		_ = g.Do(t.Context(), func(context.Context) error {
			clk.Advance(20 * time.Millisecond)
			return want
		})
	}
	for range 2 { // rejected by inner, answered by the fallback
		require.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))
	}

	s := g.Stats()
	assert.Equal(t, "payments", s.Guard)
	require.Len(t, s.Policies, 2)
	o, in := s.Policies[0], s.Policies[1]
	assert.Equal(t, "outer", o.Policy)
	assert.Equal(t, uint64(5), o.Admitted, "outer admitted every call")
	assert.Equal(t, [4]uint64{1, 1, 1, 2}, o.Outcomes, "success, failure, ignored, released by inner's rejections")
	assert.Equal(t, uint64(3), in.Admitted)
	assert.Equal(t, [4]uint64{1, 1, 1, 0}, in.Outcomes)
	assert.Equal(t, uint64(2), in.Rejected[sluice.CauseRateLimited])
	assert.Equal(t, uint64(0), o.Rejected[sluice.CauseRateLimited])
	assert.Equal(t, uint64(2), s.Fallbacks[sluice.CauseRateLimited])

	require.Len(t, ev.got, 5)
	assert.Equal(t, sluice.CallEvent{Admitted: true, Outcome: sluice.Success, Latency: 20 * time.Millisecond,
		Decision: sluice.Decision{Allowed: true, Policy: "inner", Limit: 3, Remaining: 2}}, ev.got[0],
		"the observer hears the quota of Do's call, though Do's caller sees no Decision")
	assert.Equal(t, int64(0), ev.got[2].Decision.Remaining)
	assert.Equal(t, sluice.Failure, ev.got[1].Outcome)
	assert.ErrorIs(t, ev.got[1].Err, boom)
	assert.Equal(t, sluice.Ignored, ev.got[2].Outcome)
	rej := ev.got[3]
	assert.False(t, rej.Admitted)
	assert.Equal(t, "inner", rej.Policy)
	assert.Equal(t, sluice.CauseRateLimited, rej.Cause)
	assert.Equal(t, sluice.Released, rej.Outcome)
	assert.ErrorIs(t, rej.Err, sluice.ErrRateLimited)
	assert.Equal(t, "inner", rej.Decision.Policy)
	assert.Equal(t, int64(3), rej.Decision.Limit)
	assert.False(t, rej.Decision.Allowed)

	require.NoError(t, g.Close())
	assert.Equal(t, 1, ev.detached, "Close detaches the observer")
}

func TestObservedGuardHearsTheWaitInAPolicy(t *testing.T) {
	clk := sluice.NewManualClock(time.Second)
	queue := &waiting{recorder: newRecorder("queue", -1), clk: clk, wait: 300 * time.Millisecond}
	ev := &events{}
	g := mustGuard(t, sluice.With(queue), sluice.WithClock(clk), sluice.WithObserver(ev))
	require.NoError(t, g.Do(t.Context(), func(context.Context) error {
		clk.Advance(50 * time.Millisecond)
		return nil
	}))
	require.Len(t, ev.got, 1)
	assert.Equal(t, 300*time.Millisecond, ev.got[0].Wait)
	assert.Equal(t, 50*time.Millisecond, ev.got[0].Latency)
}

func TestUnobservedGuardKeepsNoCounts(t *testing.T) {
	g := mustGuard(t, sluice.With(newRecorder("p", -1)))
	require.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))
	s := g.Stats()
	assert.Equal(t, []sluice.PolicyStats{{Policy: "p"}}, s.Policies)
	assert.Equal(t, "", g.Name())
}

func TestObservationOptionsRefuseBadInput(t *testing.T) {
	_, err := sluice.New(sluice.WithName(""))
	assert.ErrorContains(t, err, "empty name")
	// A name no metric label or log line can carry: one such series made
	// every Prometheus scrape fail.
	_, err = sluice.New(sluice.WithName("api-\xff"))
	assert.ErrorContains(t, err, "not valid UTF-8")
	_, err = sluice.New(sluice.With(newRecorder("limit-\xff", -1)))
	assert.ErrorContains(t, err, "not valid UTF-8")
	_, err = sluice.New(sluice.WithObserver(nil))
	assert.ErrorContains(t, err, "nil observer")
	var typedNil *events
	_, err = sluice.New(sluice.WithObserver(typedNil))
	assert.ErrorContains(t, err, "nil observer")

	refused := errors.New("no name")
	first, second := &events{}, &events{fail: refused}
	_, err = sluice.New(sluice.WithObserver(first), sluice.WithObserver(second))
	assert.ErrorIs(t, err, refused)
	assert.Equal(t, 1, first.detached, "a failed New detaches the observers it attached")
}

func TestObservedGuardCountsUnderConcurrency(t *testing.T) {
	g := mustGuard(t, sluice.With(newRecorder("p", -1)), sluice.WithObserver(&events{}))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				_ = g.Do(context.Background(), func(context.Context) error { return nil })
			}
		})
	}
	wg.Wait()
	p := g.Stats().Policies[0]
	assert.Equal(t, uint64(8000), p.Admitted)
	assert.Equal(t, uint64(8000), p.Outcomes[sluice.Success])
}

// A Guard's histograms count each admitted call's duration in the bucket
// whose bound is the first at or above it, by outcome, with the timeouts
// apart; the outcomes of Stats are their counts.
func TestStatsDurationsCountEachCallInItsBucket(t *testing.T) {
	ctx := context.Background()
	clock := sluice.NewManualClock(time.Hour)
	g, err := sluice.New(sluice.WithName("g"), sluice.WithClock(clock), sluice.WithObserver(statsOnly{}),
		sluice.With(&endSpy{name: "a"}))
	require.NoError(t, err)
	boom := errors.New("boom")
	call := func(d time.Duration, o sluice.Outcome, err error) {
		var c sluice.Call
		berr := g.Begin(ctx, &c)
		require.NoError(t, berr)
		clock.Advance(d)
		_ = c.Report(o, err)
	}
	call(0, sluice.Success, nil)                           // (0, 1ms]
	call(time.Millisecond, sluice.Success, nil)            // a bound is in its own bucket
	call(time.Millisecond+1, sluice.Success, nil)          // (1ms, 2.5ms]
	call(2*time.Minute, sluice.Success, nil)               // above every bound
	call(7*time.Millisecond, sluice.Failure, boom)         // (5ms, 10ms]
	call(3*time.Second, sluice.Failure, sluice.ErrTimeout) // a timeout: (2.5s, 5s]
	call(time.Second, sluice.Ignored, context.Canceled)    // (500ms, 1s]
	call(20*time.Second, sluice.Released, nil)             // (10s, 30s]

	s := g.Stats()
	bounds := s.Timeouts.Bounds()
	require.Len(t, bounds, len(s.Timeouts.Counts)-1)
	assert.Equal(t, time.Millisecond, bounds[0])
	assert.Equal(t, time.Minute, bounds[len(bounds)-1])
	want := func(sum time.Duration, buckets ...int) sluice.Histogram {
		var h sluice.Histogram
		for _, b := range buckets {
			h.Counts[b]++
		}
		h.Sum = sum
		return h
	}
	assert.Equal(t, want(2*time.Minute+2*time.Millisecond+1, 0, 0, 1, 15), s.Durations[sluice.Success])
	assert.Equal(t, want(7*time.Millisecond, 3), s.Durations[sluice.Failure])
	assert.Equal(t, want(time.Second, 9), s.Durations[sluice.Ignored])
	assert.Equal(t, want(20*time.Second, 13), s.Durations[sluice.Released])
	assert.Equal(t, want(3*time.Second, 11), s.Timeouts)
	assert.Equal(t, [...]uint64{sluice.Success: 4, sluice.Failure: 2, sluice.Ignored: 1, sluice.Released: 1},
		s.Policies[0].Outcomes, "the outcomes are the histograms' counts, timeouts among the failures")
	assert.Equal(t, uint64(8), s.Policies[0].Admitted)

	unobserved, err := sluice.New(sluice.With(&endSpy{name: "a"}))
	require.NoError(t, err)
	require.NoError(t, unobserved.Do(ctx, func(context.Context) error { return nil }))
	assert.Equal(t, sluice.Histogram{}, unobserved.Stats().Durations[sluice.Success], "an unobserved Guard counts nothing")
}

// stub is a policy that admits, or rejects with ErrRateLimited, or panics
// in Admit, or, on a Failure, in Done (as a breaker's state listener may).
type stub struct {
	name                     string
	reject, panicAdmit, done bool
}

func (p *stub) Name() string { return p.name }
func (p *stub) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if p.panicAdmit {
		panic("admit")
	}
	if p.reject {
		return 0, sluice.Quota{Limit: -1}, sluice.ErrRateLimited
	}
	return 0, sluice.Quota{Limit: -1}, nil
}
func (p *stub) Done(_ sluice.Ticket, o sluice.Outcome, _, _ time.Duration) {
	if p.done && o == sluice.Failure {
		panic("state listener")
	}
}
func (p *stub) Needs() sluice.Needs { return 0 }

// endedWithin checks that no policy of g counts more calls ended than
// admitted, and returns what each has in flight.
func endedWithin(t *testing.T, g *sluice.Guard) []uint64 {
	t.Helper()
	var out []uint64
	for _, p := range g.Stats().Policies {
		var ended uint64
		for _, n := range p.Outcomes {
			ended += n
		}
		require.LessOrEqual(t, ended, p.Admitted, p.Policy)
		out = append(out, p.Admitted-ended)
	}
	return out
}

// A policy's Admit that panics admitted no call: the counters and the
// observers hear of no admitted call ending.
func TestPanicInAdmitCountsNoAdmittedCall(t *testing.T) {
	obs := &events{}
	g, err := sluice.New(sluice.WithName("g"), sluice.With(&stub{name: "outer"}, &stub{name: "inner", panicAdmit: true}), sluice.WithObserver(obs))
	require.NoError(t, err)
	assert.Panics(t, func() { _ = g.Do(context.Background(), func(context.Context) error { return nil }) })
	assert.Equal(t, []uint64{0, 0}, endedWithin(t, g))
	assert.Empty(t, obs.got)
}

// A policy's Done that panics (a breaker's state listener) loses nothing
// of the call's end: it is counted ended and its observers hear it.
func TestPanicInDoneKeepsTheCallsEnd(t *testing.T) {
	obs := &events{}
	g, err := sluice.New(sluice.WithName("g"), sluice.With(&stub{name: "outer"}, &stub{name: "breaker", done: true}), sluice.WithObserver(obs))
	require.NoError(t, err)
	assert.Panics(t, func() { _ = g.Do(context.Background(), func(context.Context) error { return errors.New("down") }) })
	assert.Equal(t, []uint64{0, 0}, endedWithin(t, g), "nothing left in flight")
	require.Len(t, obs.got, 1)
	assert.Equal(t, sluice.Failure, obs.got[0].Outcome)
}

// Stats read while calls run never show more calls ended than admitted:
// the ends are read before the admissions, which come first in a call.
func TestStatsWhileCallsRunNeverShowMoreEndedThanAdmitted(t *testing.T) {
	g, err := sluice.New(sluice.WithName("g"), sluice.With(&stub{name: "outer"}, &stub{name: "limit", reject: true}),
		sluice.WithShadow("limit"), sluice.WithObserver(&events{}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_ = g.Do(context.Background(), func(context.Context) error { return nil })
			}
		})
	}
	for range 2000 {
		endedWithin(t, g)
	}
	cancel()
	wg.Wait()
	p := g.Stats().Policies[1]
	assert.Equal(t, p.Admitted, p.ShadowRejected, "at rest, every call was shadow rejected")
}

// A call that waited 300ms in a queue and was then rejected by a policy
// after it (one that does not wait) reports that wait to the observers.
func TestRejectionAfterAWaitReportsTheWait(t *testing.T) {
	clk := sluice.NewManualClock(time.Second)
	queue := &waiting{recorder: newRecorder("queue", -1), clk: clk, wait: 300 * time.Millisecond}
	limit := newRecorder("limit", 0) // rejects every call
	ev := &events{}
	g := mustGuard(t, sluice.With(queue, limit), sluice.WithClock(clk), sluice.WithObserver(ev))
	err := g.Do(t.Context(), func(context.Context) error { return nil })
	require.ErrorIs(t, err, sluice.ErrRateLimited)
	require.Len(t, ev.got, 1)
	assert.False(t, ev.got[0].Admitted)
	assert.Equal(t, "limit", ev.got[0].Policy)
	assert.Equal(t, 300*time.Millisecond, ev.got[0].Wait, "the call waited 300ms in the queue before it was rejected")
}

// panickyObserver is an Observer whose observe panics, as a buggy metrics exporter
// might.
type panickyObserver struct{}

func (panickyObserver) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return func(context.Context, sluice.CallEvent) { panic("observer") }, nil, nil
}

// An observer that panics when a call ends does not keep the policies that
// admitted it from hearing the end: their slots and probes would leak.
func TestPanickingObserverStillEndsThePolicies(t *testing.T) {
	outer, inner := newRecorder("outer", -1), newRecorder("inner", -1)
	g := mustGuard(t, sluice.With(outer, inner), sluice.WithObserver(panickyObserver{}))
	assert.Panics(t, func() { _ = g.Do(t.Context(), func(context.Context) error { return nil }) })
	assert.Len(t, inner.doneCalls(), 1, "the inner policy never heard the call's end")
	assert.Len(t, outer.doneCalls(), 1, "the outer policy never heard the call's end")
}

// A shadow rejection counts once its call counts as admitted (or rejected
// by a later policy): a call whose admission then panics in an inner
// policy's Admit counts in neither.
func TestShadowRejectionOfACallWhoseAdmissionPanickedIsNotCounted(t *testing.T) {
	g := mustGuard(t, sluice.WithName("g"),
		sluice.With(&stub{name: "limit", reject: true}, &stub{name: "inner", panicAdmit: true}),
		sluice.WithShadow("limit"), sluice.WithObserver(&events{}))
	assert.Panics(t, func() { _ = g.Do(context.Background(), func(context.Context) error { return nil }) })
	p := g.Stats().Policies[0]
	assert.LessOrEqual(t, p.ShadowRejected, p.Admitted, "more shadow rejected than admitted: %+v", p)
}

// gate is a policy whose Admit blocks until released, as a concurrency
// queue's does while a call waits for a slot.
type gate struct {
	entered, release chan struct{}
}

func (*gate) Name() string                                                     { return "queue" }
func (*gate) Needs() sluice.Needs                                              { return sluice.Waits }
func (*gate) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (q *gate) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	q.entered <- struct{}{}
	<-q.release
	return 1, sluice.Quota{Limit: -1}, nil
}

// While a call that a shadowed policy rejected waits in an inner queue,
// Stats shows no more shadow rejected than admitted (a dashboard's
// Admitted-ShadowRejected would wrap around).
func TestStatsWhileACallWaitsShowNoMoreShadowRejectedThanAdmitted(t *testing.T) {
	q := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	g := mustGuard(t, sluice.WithName("g"), sluice.With(&stub{name: "limit", reject: true}, q),
		sluice.WithShadow("limit"), sluice.WithObserver(&events{}))
	done := make(chan error)
	go func() { done <- g.Do(context.Background(), func(context.Context) error { return nil }) }()
	<-q.entered // the call waits in the queue, past the shadowed limit
	p := g.Stats().Policies[0]
	close(q.release)
	require.NoError(t, <-done)
	assert.LessOrEqual(t, p.ShadowRejected, p.Admitted, "a snapshot while the call waited: %+v", p)
}

// slowAdmit is a policy that never waits (no sluice.Waits) but takes a
// while to decide, as a Redis limiter's round trip does.
type slowAdmit struct {
	*recorder
	clk  *sluice.ManualClock
	took time.Duration
}

func (s *slowAdmit) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	s.clk.Advance(s.took)
	return s.recorder.Admit(ctx, now)
}

// A call's wait is the time up to the end of the policies that may wait:
// in a Guard without one, a policy slow to decide (a Redis limiter's round
// trip) makes no wait; behind a queue, its time counts with the queue's,
// the clock being read after the queue only.
func TestWaitIsZeroWithoutAPolicyThatWaits(t *testing.T) {
	clk := sluice.NewManualClock(time.Second)
	slow := &slowAdmit{recorder: newRecorder("remote", -1), clk: clk, took: 20 * time.Millisecond}
	ev := &events{}
	g := mustGuard(t, sluice.With(slow), sluice.WithClock(clk), sluice.WithObserver(ev))
	require.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))
	queue := &waiting{recorder: newRecorder("queue", -1), clk: clk, wait: 0} // a free slot
	g = mustGuard(t, sluice.With(slow, queue), sluice.WithClock(clk), sluice.WithObserver(ev))
	require.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))
	require.Len(t, ev.got, 2)
	assert.Equal(t, time.Duration(0), ev.got[0].Wait)
	assert.Equal(t, 20*time.Millisecond, ev.got[1].Wait)
}

// A shadow rejection counts once its call's rejection by a later policy
// is counted, before the observers hear it: an observer that panics on
// hearing that rejection does not lose it.
func TestShadowRejectionCountedWhenTheRejectionsObserverPanics(t *testing.T) {
	g := mustGuard(t, sluice.WithName("g"),
		sluice.With(&stub{name: "limit", reject: true}, &stub{name: "inner", reject: true}),
		sluice.WithShadow("limit"), sluice.WithObserver(panickyObserver{}))
	assert.Panics(t, func() { _ = g.Do(context.Background(), func(context.Context) error { return nil }) })
	p := g.Stats().Policies[0]
	assert.Equal(t, uint64(1), p.Admitted, "the inner policy's rejection counts the call as let through by limit")
	assert.Equal(t, uint64(1), p.ShadowRejected, "limit's shadow rejection was lost: %+v", p)
}

// A Guard made again (guardhook.Carry, a failed rules load) takes the
// calls that have ended, not those under way, which end in the closed
// Guard: nor their shadow rejections, or its Stats would show a policy
// that shadow rejected more calls than it admitted.
func TestACarriedGuardTakesNoShadowRejectionOfACallUnderWay(t *testing.T) {
	limit := &stub{name: "limit", reject: true}
	opts := []sluice.Option{sluice.WithName("api"), sluice.With(limit), sluice.WithShadow("limit"), sluice.WithObserver(&events{})}
	g1, err := sluice.New(opts...)
	require.NoError(t, err)
	var under sluice.Call
	require.NoError(t, g1.Begin(context.Background(), &under)) // shadow rejected, let through
	require.NoError(t, g1.Close())
	g2, err := sluice.New(opts...)
	require.NoError(t, err)
	defer g2.Close()
	guardhook.Carry(g1, g2)
	require.NoError(t, under.End(nil))

	p := g2.Stats().Policies[0]
	assert.LessOrEqual(t, p.ShadowRejected, p.Admitted, "shadow rejected %d of %d admitted", p.ShadowRejected, p.Admitted)
}
