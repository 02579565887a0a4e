package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policytest"
	"github.com/sluice-go/sluice/ratelimit"
)

// call is one Done a recorder heard.
type call struct {
	ticket  sluice.Ticket
	outcome sluice.Outcome
	now     time.Duration
	latency time.Duration
}

// recorder is a test policy: it admits while quota > 0 (or always when
// quota < 0), hands out increasing tickets, and records every Done.
type recorder struct {
	name   string
	quota  atomic.Int64
	limit  int64
	issued atomic.Uint64
	mu     sync.Mutex
	admits []time.Duration
	dones  []call
	cause  error
}

func newRecorder(name string, quota int64) *recorder {
	r := &recorder{name: name, cause: sluice.ErrRateLimited, limit: quota}
	r.quota.Store(quota)
	return r
}

func (r *recorder) Name() string { return r.name }

func (r *recorder) Admit(_ context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	r.mu.Lock()
	r.admits = append(r.admits, now)
	r.mu.Unlock()
	q := r.quota.Load()
	if q == 0 {
		return sluice.Decision{Policy: r.name, Limit: r.limit, RetryAfter: time.Second, Cause: r.cause}, 0
	}
	if q > 0 {
		r.quota.Add(-1)
	}
	rem := q - 1
	if q < 0 {
		return sluice.Decision{Allowed: true, Policy: r.name, Limit: -1}, sluice.Ticket(r.issued.Add(1))
	}
	return sluice.Decision{Allowed: true, Policy: r.name, Limit: r.limit, Remaining: rem}, sluice.Ticket(r.issued.Add(1))
}

func (r *recorder) Done(t sluice.Ticket, o sluice.Outcome, now, lat time.Duration) {
	r.mu.Lock()
	r.dones = append(r.dones, call{t, o, now, lat})
	r.mu.Unlock()
	if o == sluice.Released && r.quota.Load() >= 0 {
		r.quota.Add(1)
	}
}

func (r *recorder) doneCalls() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.dones...)
}

func mustGuard(t testing.TB, opts ...sluice.Option) *sluice.Guard {
	t.Helper()
	g, err := sluice.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func TestGuardDoReadsClockOnceOnArrivalAndOnceAtEnd(t *testing.T) {
	clk := sluice.NewManualClock(10 * time.Second)
	outer, inner := newRecorder("outer", -1), newRecorder("inner", -1)
	g := mustGuard(t, sluice.With(outer, inner), sluice.WithClock(clk))

	err := g.Do(t.Context(), func(context.Context) error {
		clk.Advance(250 * time.Millisecond)
		return nil
	})
	require.NoError(t, err)
	for _, r := range []*recorder{outer, inner} {
		assert.Equal(t, []time.Duration{10 * time.Second}, r.admits, r.name)
		assert.Equal(t, []call{{1, sluice.Success, 10250 * time.Millisecond, 250 * time.Millisecond}}, r.doneCalls(), r.name)
	}
}

func TestGuardDoneOrderIsInnerFirst(t *testing.T) {
	var order []string
	var mu sync.Mutex
	mk := func(name string) sluice.Policy {
		return &orderPolicy{recorder: newRecorder(name, -1), log: func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }}
	}
	g := mustGuard(t, sluice.With(mk("a"), mk("b"), mk("c")))
	require.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))
	assert.Equal(t, []string{"admit a", "admit b", "admit c", "done c", "done b", "done a"}, order)
}

type orderPolicy struct {
	*recorder
	log func(string)
}

func (p *orderPolicy) Admit(ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	p.log("admit " + p.name)
	return p.recorder.Admit(ctx, now)
}

func (p *orderPolicy) Done(t sluice.Ticket, o sluice.Outcome, now, lat time.Duration) {
	p.log("done " + p.name)
	p.recorder.Done(t, o, now, lat)
}

func TestGuardInnerRejectionReleasesOuterPolicies(t *testing.T) {
	a, b, c := newRecorder("a", 5), newRecorder("b", 5), newRecorder("c", 0)
	c.cause = sluice.ErrCircuitOpen
	g := mustGuard(t, sluice.With(a, b, c))
	ran := false
	err := g.Do(t.Context(), func(context.Context) error { ran = true; return nil })

	require.False(t, ran)
	var rej *sluice.RejectedError
	require.ErrorAs(t, err, &rej)
	assert.ErrorIs(t, err, sluice.ErrRejected)
	assert.ErrorIs(t, err, sluice.ErrCircuitOpen)
	assert.NotErrorIs(t, err, sluice.ErrRateLimited)
	assert.Equal(t, "c", rej.Decision.Policy)
	for _, r := range []*recorder{a, b} {
		calls := r.doneCalls()
		require.Len(t, calls, 1, r.name)
		assert.Equal(t, sluice.Released, calls[0].outcome, r.name)
		assert.Equal(t, sluice.Ticket(1), calls[0].ticket, r.name)
		assert.Equal(t, int64(5), r.quota.Load(), "%s gave back its quota", r.name)
	}
	assert.Empty(t, c.doneCalls(), "the rejecting policy hears no Done")
}

func TestGuardReleasesEveryAdmittedPolicyBeyondInlineTickets(t *testing.T) {
	var rs []*recorder
	var ps []sluice.Policy
	for i := range 9 {
		r := newRecorder(fmt.Sprintf("p%d", i), 3)
		rs = append(rs, r)
		ps = append(ps, r)
	}
	g := mustGuard(t, sluice.With(ps...))
	require.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))
	for _, r := range rs {
		require.Len(t, r.doneCalls(), 1, r.name)
		assert.Equal(t, sluice.Ticket(1), r.doneCalls()[0].ticket)
	}
	rs[8].quota.Store(0)
	require.Error(t, g.Do(t.Context(), func(context.Context) error { return nil }))
	for _, r := range rs[:8] {
		calls := r.doneCalls()
		require.Len(t, calls, 2, r.name)
		assert.Equal(t, call{2, sluice.Released, calls[1].now, 0}, calls[1], r.name)
	}
}

func TestGuardClassifiesOutcomes(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		err  error
		want sluice.Outcome
	}{
		{"nil is success", nil, sluice.Success},
		{"error is failure", boom, sluice.Failure},
		{"deadline is failure", context.DeadlineExceeded, sluice.Failure},
		{"caller cancel is ignored", fmt.Errorf("call: %w", context.Canceled), sluice.Ignored},
		{"nested rejection is ignored", &sluice.RejectedError{Decision: sluice.Decision{Cause: sluice.ErrRateLimited}}, sluice.Ignored},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRecorder("r", -1)
			g := mustGuard(t, sluice.With(r))
			err := g.Do(t.Context(), func(context.Context) error { return tt.err })
			assert.Equal(t, tt.err, err, "Do returns fn's error unchanged")
			require.Len(t, r.doneCalls(), 1)
			assert.Equal(t, tt.want, r.doneCalls()[0].outcome)
		})
	}
}

func TestGuardCustomClassifier(t *testing.T) {
	notFound := errors.New("not found")
	r := newRecorder("r", -1)
	g := mustGuard(t, sluice.With(r), sluice.WithClassifier(func(err error) sluice.Outcome {
		if errors.Is(err, notFound) {
			return sluice.Ignored
		}
		return sluice.DefaultClassifier(err)
	}))
	_ = g.Do(t.Context(), func(context.Context) error { return notFound })
	assert.Equal(t, sluice.Ignored, r.doneCalls()[0].outcome)
}

func TestGuardPanicReportsFailureAndRepanics(t *testing.T) {
	a, b := newRecorder("a", -1), newRecorder("b", -1)
	g := mustGuard(t, sluice.With(a, b))
	assert.PanicsWithValue(t, "kaboom", func() {
		_ = g.Do(t.Context(), func(context.Context) error { panic("kaboom") })
	})
	for _, r := range []*recorder{a, b} {
		require.Len(t, r.doneCalls(), 1, r.name)
		assert.Equal(t, sluice.Failure, r.doneCalls()[0].outcome)
	}
	assert.Panics(t, func() {
		_, _ = sluice.Execute(t.Context(), g, func(context.Context) (int, error) { panic("again") })
	})
	assert.Len(t, a.doneCalls(), 2)
}

func TestExecuteReturnsValueOrRejection(t *testing.T) {
	r := newRecorder("r", 1)
	g := mustGuard(t, sluice.With(r))
	v, err := sluice.Execute(t.Context(), g, func(context.Context) (string, error) { return "ok", nil })
	require.NoError(t, err)
	assert.Equal(t, "ok", v)
	v, err = sluice.Execute(t.Context(), g, func(context.Context) (string, error) { return "ran", nil })
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
	assert.Equal(t, "", v)
}

func TestAdmitTwoStep(t *testing.T) {
	clk := sluice.NewManualClock(0)
	limit := newRecorder("limit", 2)
	g := mustGuard(t, sluice.With(limit), sluice.WithClock(clk))

	d, done, err := g.Admit(t.Context())
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(1), d.Remaining)
	assert.True(t, done.Active())
	clk.Advance(time.Second)
	done.Finish(errors.New("5xx"))
	done.Finish(nil) // second call counts for nothing
	done.Record(sluice.Success)
	assert.False(t, done.Active())
	assert.Equal(t, []call{{1, sluice.Failure, time.Second, time.Second}}, limit.doneCalls())

	_, done, _ = g.Admit(t.Context())
	done.Record(sluice.Success)
	d, done, err = g.Admit(t.Context())
	assert.False(t, d.Allowed)
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
	assert.False(t, done.Active())
	done.Finish(nil) // a rejected Done does nothing
	assert.Len(t, limit.doneCalls(), 2)
}

func TestAdmitReportsTightestQuota(t *testing.T) {
	loose, tight, noQuota := newRecorder("loose", 9), newRecorder("tight", 3), newRecorder("breaker", -1)
	g := mustGuard(t, sluice.With(loose, noQuota, tight))
	d, done, err := g.Admit(t.Context())
	require.NoError(t, err)
	defer done.Record(sluice.Success)
	assert.Equal(t, "tight", d.Policy)
	assert.Equal(t, int64(2), d.Remaining)

	g2 := mustGuard(t, sluice.With(newRecorder("breaker", -1)))
	d, done2, err := g2.Admit(t.Context())
	require.NoError(t, err)
	defer done2.Record(sluice.Success)
	assert.Equal(t, int64(-1), d.Limit)
}

func TestNilGuardPassesThrough(t *testing.T) {
	var g *sluice.Guard
	called := false
	require.NoError(t, g.Do(t.Context(), func(context.Context) error { called = true; return nil }))
	assert.True(t, called)
	d, done, err := g.Admit(t.Context())
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	done.Finish(nil)
	assert.NoError(t, g.Close())
}

func TestNewValidates(t *testing.T) {
	_, err := sluice.New(sluice.With(nil))
	assert.ErrorContains(t, err, "policy 0 is nil")
	_, err = sluice.New(sluice.WithClock(nil))
	assert.Error(t, err)
	_, err = sluice.New(sluice.WithClassifier(nil))
	assert.Error(t, err)
	_, err = sluice.New(sluice.OnDecision(nil))
	assert.Error(t, err)
	_, err = sluice.New(sluice.OnStateChange(nil))
	assert.Error(t, err)
	g, err := sluice.New()
	require.NoError(t, err)
	assert.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))
}

func TestOnDecisionSeesEveryRequestOnce(t *testing.T) {
	var seen []sluice.Decision
	r := newRecorder("r", 1)
	g := mustGuard(t, sluice.With(r), sluice.OnDecision(func(_ context.Context, d sluice.Decision) { seen = append(seen, d) }))
	_ = g.Do(t.Context(), func(context.Context) error { return nil })
	_ = g.Do(t.Context(), func(context.Context) error { return nil })
	require.Len(t, seen, 2)
	assert.True(t, seen[0].Allowed)
	assert.False(t, seen[1].Allowed)
	assert.ErrorIs(t, seen[1].Cause, sluice.ErrRateLimited)
}

// stateful is a policy with states, to test OnStateChange plumbing.
type stateful struct {
	*recorder
	mu   sync.Mutex
	subs map[int]func(sluice.StateChange)
	next int
}

func (s *stateful) Subscribe(fn func(sluice.StateChange)) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs == nil {
		s.subs = map[int]func(sluice.StateChange){}
	}
	id := s.next
	s.next++
	s.subs[id] = fn
	return func() { s.mu.Lock(); delete(s.subs, id); s.mu.Unlock() }
}

func (s *stateful) change(from, to string) {
	s.mu.Lock()
	var fns []func(sluice.StateChange)
	for _, fn := range s.subs {
		fns = append(fns, fn)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn(sluice.StateChange{Policy: s.name, From: from, To: to})
	}
}

func TestOnStateChangeSubscribesAndCloseUnsubscribes(t *testing.T) {
	p := &stateful{recorder: newRecorder("breaker/x", -1)}
	var got []sluice.StateChange
	g, err := sluice.New(sluice.With(p), sluice.OnStateChange(func(c sluice.StateChange) { got = append(got, c) }))
	require.NoError(t, err)
	p.change("closed", "open")
	require.NoError(t, g.Close())
	p.change("open", "half-open")
	assert.Equal(t, []sluice.StateChange{{Policy: "breaker/x", From: "closed", To: "open"}}, got)
}

type closer struct {
	*recorder
	closed atomic.Int32
}

func (c *closer) Close() error { c.closed.Add(1); return nil }

func TestCloseClosesPolicies(t *testing.T) {
	c := &closer{recorder: newRecorder("c", -1)}
	g, err := sluice.New(sluice.With(c))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	assert.Equal(t, int32(1), c.closed.Load())
}

func TestRejectedErrorText(t *testing.T) {
	err := &sluice.RejectedError{Decision: sluice.Decision{Policy: "ratelimit/per-ip", RetryAfter: 1500 * time.Millisecond, Cause: sluice.ErrRateLimited}}
	assert.Equal(t, "sluice: rate limited by ratelimit/per-ip; retry after 1.5s", err.Error())
	assert.Equal(t, 1500*time.Millisecond, err.RetryAfter())
	assert.Equal(t, sluice.CauseRateLimited, sluice.CauseOf(err))
	assert.Equal(t, "rate-limited", sluice.CauseOf(err).String())
	assert.Equal(t, sluice.CauseNone, sluice.CauseOf(errors.New("other")))
	assert.Equal(t, sluice.CauseOverloaded, sluice.CauseOf(fmt.Errorf("wrapped: %w", &sluice.RejectedError{Decision: sluice.Decision{Cause: sluice.ErrOverloaded}})))
}

func TestContextIdentity(t *testing.T) {
	ctx := t.Context()
	_, ok := sluice.KeyFrom(ctx)
	assert.False(t, ok)
	assert.Equal(t, int64(1), sluice.CostFrom(ctx))
	assert.Equal(t, sluice.PriorityNormal, sluice.PriorityFrom(ctx))
	ctx = sluice.WithKey(ctx, "10.0.0.1")
	ctx = sluice.WithResource(ctx, "GET /users/{id}")
	ctx = sluice.WithCost(ctx, 5)
	ctx = sluice.WithPriority(ctx, sluice.PriorityCritical)
	k, _ := sluice.KeyFrom(ctx)
	r, _ := sluice.ResourceFrom(ctx)
	assert.Equal(t, "10.0.0.1", k)
	assert.Equal(t, "GET /users/{id}", r)
	assert.Equal(t, int64(5), sluice.CostFrom(ctx))
	assert.Equal(t, sluice.PriorityCritical, sluice.PriorityFrom(ctx))
	assert.Equal(t, int64(1), sluice.CostFrom(sluice.WithCost(t.Context(), -3)))
}

var ctxSink context.Context

// A key and a resource set together, or one over the other, read back
// through any context wrapped around them; the inner one of two keys is
// hidden by the outer; reading them allocates nothing, and setting both at
// once allocates once.
func TestKeyAndResourceTogether(t *testing.T) {
	ctx := sluice.WithKeyAndResource(t.Context(), "alice", "GET /a")
	wrapped, cancel := context.WithCancel(sluice.WithCost(ctx, 2))
	defer cancel()
	for _, c := range []context.Context{ctx, wrapped} {
		k, ok := sluice.KeyFrom(c)
		assert.True(t, ok)
		assert.Equal(t, "alice", k)
		r, ok := sluice.ResourceFrom(c)
		assert.True(t, ok)
		assert.Equal(t, "GET /a", r)
	}
	over := sluice.WithKey(sluice.WithResource(t.Context(), "GET /b"), "bob")
	k, _ := sluice.KeyFrom(over)
	r, _ := sluice.ResourceFrom(over)
	assert.Equal(t, "bob", k)
	assert.Equal(t, "GET /b", r)
	k, _ = sluice.KeyFrom(sluice.WithKey(over, "carol"))
	assert.Equal(t, "carol", k)
	_, ok := sluice.ResourceFrom(sluice.WithKey(t.Context(), "dave"))
	assert.False(t, ok, "a key alone names no resource")
	_, ok = sluice.KeyFrom(sluice.WithResource(t.Context(), "GET /c"))
	assert.False(t, ok, "a resource alone is no key")

	base := context.Background()
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { ctxSink = sluice.WithKeyAndResource(base, "alice", "GET /a") }))
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		_, _ = sluice.KeyFrom(wrapped)
		_, _ = sluice.ResourceFrom(wrapped)
	}))
}

func TestGuardConcurrentDoneOncePerAdmit(t *testing.T) {
	a, b := newRecorder("a", -1), newRecorder("b", -1)
	g := mustGuard(t, sluice.With(a, b))
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				_ = g.Do(context.Background(), func(context.Context) error { return nil })
			}
		}()
	}
	wg.Wait()
	assert.Len(t, a.doneCalls(), 3200)
	assert.Len(t, b.doneCalls(), 3200)
}

// The test policy itself passes the conformance suite, which keeps the suite
// honest about what it asks.
func TestRecorderConformance(t *testing.T) {
	policytest.Run(t, policytest.Config{
		New: func(*testing.T) sluice.Policy { return newRecorder("recorder", 1<<40) },
	})
}

func TestManualClock(t *testing.T) {
	c := sluice.NewManualClock(time.Second)
	assert.Equal(t, 3*time.Second, c.Advance(2*time.Second))
	c.Set(time.Minute)
	assert.Equal(t, time.Minute, c.Now())
	m := sluice.NewMonotonicClock()
	assert.GreaterOrEqual(t, m.Now(), time.Duration(0))
	assert.GreaterOrEqual(t, sluice.Now(), time.Duration(0))
}

func TestOutcomeString(t *testing.T) {
	assert.Equal(t, "success failure ignored released outcome(9)",
		fmt.Sprint(sluice.Success, " ", sluice.Failure, " ", sluice.Ignored, " ", sluice.Released, " ", sluice.Outcome(9)))
}

// waiting is a policy whose Admit blocks: it moves the manual clock forward,
// as a queue wait would.
type waiting struct {
	*recorder
	clk  *sluice.ManualClock
	wait time.Duration
}

func (w *waiting) MayWait() bool { return true }

func (w *waiting) Admit(ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	w.clk.Advance(w.wait)
	return w.recorder.Admit(ctx, now)
}

func TestGuardAfterAWaitDecidesAndMeasuresFromTheWaitsEnd(t *testing.T) {
	clk := sluice.NewManualClock(time.Second)
	outer := newRecorder("outer", -1)
	queue := &waiting{recorder: newRecorder("queue", -1), clk: clk, wait: 300 * time.Millisecond}
	inner := newRecorder("inner", -1)
	g := mustGuard(t, sluice.With(outer, queue, inner), sluice.WithClock(clk))

	require.NoError(t, g.Do(t.Context(), func(context.Context) error {
		clk.Advance(50 * time.Millisecond)
		return nil
	}))
	assert.Equal(t, []time.Duration{time.Second}, outer.admits)
	assert.Equal(t, []time.Duration{time.Second}, queue.admits, "the waiting policy decides at arrival")
	assert.Equal(t, []time.Duration{1300 * time.Millisecond}, inner.admits, "the next one at the wait's end")
	for _, r := range []*recorder{outer, queue.recorder, inner} {
		assert.Equal(t, []call{{1, sluice.Success, 1350 * time.Millisecond, 50 * time.Millisecond}}, r.doneCalls(),
			"%s hears the call's own latency", r.name)
	}
}

// A release after a wait tells each outer policy how long ago it admitted, so
// now - latency is the instant its own Admit was given.
func TestGuardReleaseAfterAWaitCarriesTheTimeSinceEachAdmit(t *testing.T) {
	clk := sluice.NewManualClock(time.Second)
	outer := newRecorder("outer", 5)
	queue := &waiting{recorder: newRecorder("queue", 5), clk: clk, wait: 300 * time.Millisecond}
	middle := newRecorder("middle", 5)
	giveUp := &waiting{recorder: newRecorder("gives-up", 0), clk: clk, wait: 200 * time.Millisecond}
	g := mustGuard(t, sluice.With(outer, queue, middle, giveUp), sluice.WithClock(clk))

	err := g.Do(t.Context(), func(context.Context) error { return nil })
	require.ErrorIs(t, err, sluice.ErrRateLimited)
	end := 1500 * time.Millisecond // both waits are over
	assert.Equal(t, []call{{1, sluice.Released, end, 500 * time.Millisecond}}, outer.doneCalls())
	assert.Equal(t, []call{{1, sluice.Released, end, 500 * time.Millisecond}}, queue.doneCalls(),
		"the waiting policy admitted at arrival")
	assert.Equal(t, []call{{1, sluice.Released, end, 200 * time.Millisecond}}, middle.doneCalls(),
		"the one after the wait admitted at its end")
}

// Released after an admission that waited, as an adapter reports a request
// that an inner layer turned away, tells each policy how long ago its own
// Admit was, as a release within the chain does.
func TestGuardRecordReleasedAfterAWaitCarriesTheTimeSinceEachAdmit(t *testing.T) {
	clk := sluice.NewManualClock(time.Second)
	outer := newRecorder("outer", 5)
	queue := &waiting{recorder: newRecorder("queue", 5), clk: clk, wait: 300 * time.Millisecond}
	inner := newRecorder("inner", 5)
	g := mustGuard(t, sluice.With(outer, queue, inner), sluice.WithClock(clk))

	_, done, err := g.Admit(t.Context())
	require.NoError(t, err)
	clk.Advance(100 * time.Millisecond)
	done.Record(sluice.Released)
	end := 1400 * time.Millisecond
	assert.Equal(t, []call{{1, sluice.Released, end, 400 * time.Millisecond}}, outer.doneCalls())
	assert.Equal(t, []call{{1, sluice.Released, end, 400 * time.Millisecond}}, queue.doneCalls(),
		"the waiting policy admitted at arrival")
	assert.Equal(t, []call{{1, sluice.Released, end, 100 * time.Millisecond}}, inner.doneCalls(),
		"the one after the wait admitted at its end")
}

// A panic before the call ran (an OnDecision observer, a policy's Admit)
// releases every policy that had admitted; none is left waiting for a Done.
func TestGuardPanicBeforeTheCallReleasesAdmittedPolicies(t *testing.T) {
	a, b := newRecorder("a", 5), newRecorder("b", 5)
	g := mustGuard(t, sluice.With(a, b), sluice.OnDecision(func(context.Context, sluice.Decision) { panic("observer") }))
	assert.PanicsWithValue(t, "observer", func() {
		_ = g.Do(t.Context(), func(context.Context) error { t.Fatal("the call must not run"); return nil })
	})
	for _, r := range []*recorder{a, b} {
		require.Len(t, r.doneCalls(), 1, r.name)
		assert.Equal(t, sluice.Released, r.doneCalls()[0].outcome, r.name)
		assert.Equal(t, int64(5), r.quota.Load(), "%s gave its quota back", r.name)
	}

	outer := newRecorder("outer", 5)
	g2 := mustGuard(t, sluice.With(outer, panicky{}))
	assert.PanicsWithValue(t, "admit", func() {
		_, _ = sluice.Execute(t.Context(), g2, func(context.Context) (int, error) { return 1, nil })
	})
	require.Len(t, outer.doneCalls(), 1)
	assert.Equal(t, sluice.Released, outer.doneCalls()[0].outcome)
}

// panicky is a policy whose Admit panics.
type panicky struct{}

func (panicky) Name() string { return "panicky" }
func (panicky) Admit(context.Context, time.Duration) (sluice.Decision, sluice.Ticket) {
	panic("admit")
}
func (panicky) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

// A call past its Guard's deadline is a timeout, and a Failure, even when
// what it returned wraps context.Canceled.
func TestTimeoutWrappingCanceledIsAFailure(t *testing.T) {
	err := &sluice.TimeoutError{After: time.Second, Err: fmt.Errorf("driver: %w", context.Canceled)}
	assert.Equal(t, sluice.Failure, sluice.DefaultClassifier(err))
	assert.Equal(t, sluice.Ignored, sluice.DefaultClassifier(fmt.Errorf("driver: %w", context.Canceled)))
}

// AdmitTo is Admit written in place: the same Decision and Done, a rejection
// in *d, a panic in a policy releasing the ones before it, and nothing
// allocated.
func TestAdmitToWritesInPlace(t *testing.T) {
	clk := sluice.NewManualClock(0)
	limit := newRecorder("limit", 1)
	g := mustGuard(t, sluice.With(newRecorder("breaker", -1), limit), sluice.WithClock(clk))

	var d sluice.Decision
	var done sluice.Done
	require.NoError(t, g.AdmitTo(t.Context(), &d, &done))
	assert.Equal(t, sluice.Decision{Allowed: true, Policy: "limit", Limit: 1, Remaining: 0}, d)
	assert.True(t, done.Active())
	clk.Advance(time.Second)
	done.Finish(nil)
	assert.Equal(t, []call{{1, sluice.Success, time.Second, time.Second}}, limit.doneCalls())

	err := g.AdmitTo(t.Context(), &d, &done)
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
	assert.False(t, d.Allowed)
	assert.Equal(t, "limit", d.Policy)
	var rej *sluice.RejectedError
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, d, rej.Decision)
	assert.False(t, done.Active())

	outer := newRecorder("outer", 5)
	g2 := mustGuard(t, sluice.With(outer, panicky{}))
	assert.PanicsWithValue(t, "admit", func() { _ = g2.AdmitTo(t.Context(), &d, &done) })
	require.Len(t, outer.doneCalls(), 1)
	assert.Equal(t, sluice.Released, outer.doneCalls()[0].outcome)
	assert.False(t, done.Active())

	var nilGuard *sluice.Guard
	require.NoError(t, nilGuard.AdmitTo(t.Context(), &d, &done))
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(-1), d.Limit)
	assert.False(t, done.Active())

	// Without a Decision to write: the rejection's is in the error, and an
	// observer still hears every Decision.
	var seen []sluice.Decision
	lim := newRecorder("limit", 1)
	g4 := mustGuard(t, sluice.With(lim), sluice.OnDecision(func(_ context.Context, d sluice.Decision) { seen = append(seen, d) }))
	require.NoError(t, g4.AdmitTo(t.Context(), nil, &done))
	assert.True(t, done.Active())
	done.Finish(nil)
	err = g4.AdmitTo(t.Context(), nil, &done)
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, "limit", rej.Decision.Policy)
	require.Len(t, seen, 2)
	assert.True(t, seen[0].Allowed)
	assert.False(t, seen[1].Allowed)
	require.NoError(t, nilGuard.AdmitTo(t.Context(), nil, &done))

	g3 := mustGuard(t, sluice.With(nopPolicy{}, nopPolicy{}))
	ctx := t.Context()
	if n := testing.AllocsPerRun(200, func() {
		var d sluice.Decision
		var done sluice.Done
		if g3.AdmitTo(ctx, &d, &done) == nil {
			done.Finish(nil)
		}
		if g3.AdmitTo(ctx, nil, &done) == nil {
			done.Finish(nil)
		}
	}); n != 0 {
		t.Fatalf("AdmitTo allocates %v times per call, want 0", n)
	}
}

// overriding embeds a policy with a fast form and overrides Admit: the
// inherited AdmitFast would bypass the override.
type overriding struct {
	*ratelimit.TokenBucket
	calls int
}

func (o *overriding) Admit(context.Context, time.Duration) (sluice.Decision, sluice.Ticket) {
	o.calls++
	return sluice.Decision{Policy: o.Name(), Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrRateLimited}, 0
}

// A policy that inherits AdmitFast from one it embeds is asked through its
// own Admit; one with its own fast form is asked through that.
func TestGuardAsksAnEmbeddingPolicyThroughItsAdmit(t *testing.T) {
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10)
	require.NoError(t, err)
	o := &overriding{TokenBucket: tb}
	assert.Nil(t, sluice.FastFormOf(o))
	assert.NotNil(t, sluice.FastFormOf(tb))
	assert.Nil(t, sluice.FastFormOf(nopPolicy{}))

	g := mustGuard(t, sluice.With(o))
	err = g.Do(t.Context(), func(context.Context) error { t.Fatal("the override rejects"); return nil })
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
	var d sluice.Decision
	var done sluice.Done
	assert.ErrorIs(t, g.AdmitTo(t.Context(), nil, &done), sluice.ErrRateLimited)
	assert.ErrorIs(t, g.AdmitTo(t.Context(), &d, &done), sluice.ErrRateLimited)
	assert.Equal(t, 3, o.calls)

	keyed, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) { return &overriding{TokenBucket: tb}, nil })
	require.NoError(t, err)
	g2 := mustGuard(t, sluice.With(keyed))
	err = g2.Do(sluice.WithKey(t.Context(), "k"), func(context.Context) error { t.Fatal("the override rejects"); return nil })
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
}
