package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/policytest"
	"github.com/sluice-go/sluice/internal/reqid"
	"github.com/sluice-go/sluice/internal/timeouterr"
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
	needs  sluice.Needs
}

func newRecorder(name string, quota int64) *recorder {
	r := &recorder{name: name, cause: sluice.ErrRateLimited, limit: quota}
	r.quota.Store(quota)
	return r
}

func (r *recorder) Name() string { return r.name }

func (r *recorder) Needs() sluice.Needs { return r.needs }

func (r *recorder) Admit(_ context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	r.mu.Lock()
	r.admits = append(r.admits, now)
	r.mu.Unlock()
	q := r.quota.Load()
	if q == 0 {
		return 0, sluice.Quota{Limit: r.limit, RetryAfter: time.Second}, r.cause
	}
	if q > 0 {
		r.quota.Add(-1)
	}
	rem := q - 1
	if q < 0 {
		return sluice.Ticket(r.issued.Add(1)), sluice.Quota{Limit: -1}, nil
	}
	return sluice.Ticket(r.issued.Add(1)), sluice.Quota{Limit: r.limit, Remaining: rem}, nil
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

// rejection returns the Decision of the rejection err, failing t when err is
// none.
func rejection(t testing.TB, err error) sluice.Decision {
	t.Helper()
	d, ok := sluice.RejectionOf(err)
	require.True(t, ok, "%v is no rejection", err)
	require.ErrorIs(t, err, sluice.ErrRejected)
	return d
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

func (p *orderPolicy) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
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
	d := rejection(t, err)
	assert.ErrorIs(t, err, sluice.ErrCircuitOpen)
	assert.NotErrorIs(t, err, sluice.ErrRateLimited)
	assert.Equal(t, "c", d.Policy)
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
		{"nested rejection is ignored", sluice.Rejection(sluice.Decision{Cause: sluice.ErrRateLimited}), sluice.Ignored},
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

func TestBeginEndTwoStep(t *testing.T) {
	clk := sluice.NewManualClock(0)
	limit := newRecorder("limit", 2)
	g := mustGuard(t, sluice.With(limit), sluice.WithClock(clk))

	var c sluice.Call

	err := g.Begin(t.Context(), &c)
	require.NoError(t, err)
	d := c.Decision()
	assert.True(t, d.Allowed)
	assert.Equal(t, "limit", d.Policy)
	assert.Equal(t, int64(1), d.Remaining)
	assert.Equal(t, t.Context(), c.Context(), "no timeout: the context given")
	clk.Advance(time.Second)
	fail := errors.New("5xx")
	assert.Same(t, fail, c.End(fail))
	assert.NoError(t, c.End(nil), "a second End counts for nothing")
	assert.Same(t, fail, c.Report(sluice.Success, fail), "nor does a Report after it")
	assert.Equal(t, []call{{1, sluice.Failure, time.Second, time.Second}}, limit.doneCalls())

	err = g.Begin(t.Context(), &c)
	require.NoError(t, err)
	assert.NoError(t, c.Report(sluice.Success, nil))
	err = g.Begin(t.Context(), &c)
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
	d = c.Decision()
	assert.False(t, d.Allowed)
	assert.Equal(t, "limit", d.Policy)
	assert.Equal(t, time.Second, d.RetryAfter)
	assert.ErrorIs(t, d.Cause, sluice.ErrRateLimited)
	rd := rejection(t, err)
	assert.Equal(t, d, rd, "read at the rejection's instant")
	assert.Same(t, err, c.End(err), "End of a rejection without fallbacks returns it")
	assert.Len(t, limit.doneCalls(), 2, "a rejected call reports nothing")
}

// Report ends a call with the adapter's own outcome, turns an error past
// the deadline into a timeout, and asks no fallback.
func TestCallReportAsksNoFallback(t *testing.T) {
	r := newRecorder("r", -1)
	asked := false
	g := mustGuard(t, sluice.With(r), sluice.WithFallback(fbFunc[int]{name: "f", fn: func(context.Context, error) (int, error) {
		asked = true
		return 0, nil
	}}))
	var c sluice.Call
	err := g.Begin(t.Context(), &c)
	require.NoError(t, err)
	assert.Same(t, errFallbackCall, c.Report(sluice.Ignored, errFallbackCall))
	assert.False(t, asked)
	require.Len(t, r.doneCalls(), 1)
	assert.Equal(t, sluice.Ignored, r.doneCalls()[0].outcome)
}

func TestBeginReportsTightestQuota(t *testing.T) {
	loose, tight, noQuota := newRecorder("loose", 9), newRecorder("tight", 3), newRecorder("breaker", -1)
	g := mustGuard(t, sluice.With(loose, noQuota, tight))
	var c sluice.Call
	err := g.Begin(t.Context(), &c)
	require.NoError(t, err)
	defer func() { _ = c.End(nil) }()
	d := c.Decision()
	assert.Equal(t, "tight", d.Policy)
	assert.Equal(t, int64(2), d.Remaining)

	g2 := mustGuard(t, sluice.With(newRecorder("breaker", -1)))
	var c2 sluice.Call
	err = g2.Begin(t.Context(), &c2)
	require.NoError(t, err)
	defer func() { _ = c2.End(nil) }()
	assert.Equal(t, sluice.Decision{Allowed: true, Limit: -1}, c2.Decision())
}

func TestNilGuardPassesThrough(t *testing.T) {
	var g *sluice.Guard
	called := false
	require.NoError(t, g.Do(t.Context(), func(context.Context) error { called = true; return nil }))
	assert.True(t, called)
	v, err := sluice.Execute(t.Context(), g, func(context.Context) (int, error) { return 3, nil })
	require.NoError(t, err)
	assert.Equal(t, 3, v)
	var c sluice.Call
	err = g.Begin(t.Context(), &c)
	require.NoError(t, err)
	assert.True(t, c.Decision().Allowed)
	assert.Equal(t, int64(-1), c.Decision().Limit)
	assert.Equal(t, t.Context(), c.Context())
	assert.NoError(t, c.End(nil))
	assert.Same(t, errFallbackCall, c.End(errFallbackCall))
	assert.Nil(t, g.Policies())
	assert.NoError(t, g.Close())
}

// A nil context or function is a programming error that Do, Execute and
// Begin report rather than panic on, for a Guard and a nil one alike, and
// no policy hears of it.
func TestNilArgumentIsAnError(t *testing.T) {
	r := newRecorder("r", -1)
	for name, g := range map[string]*sluice.Guard{
		"guard":          mustGuard(t, sluice.With(r)),
		"with fallbacks": mustGuard(t, sluice.With(r), sluice.WithFallback(fbValue("page", "maintenance page"))),
		"nil guard":      nil,
	} {
		var nilCtx context.Context
		fn := func(context.Context) error { t.Fatal("ran"); return nil }
		assert.ErrorContains(t, g.Do(nilCtx, fn), "sluice: nil context or function", name)
		assert.ErrorContains(t, g.Do(t.Context(), nil), "sluice: nil context or function", name)
		_, err := sluice.Execute(nilCtx, g, func(context.Context) (int, error) { t.Fatal("ran"); return 0, nil })
		assert.ErrorContains(t, err, "sluice: nil context or function", name)
		_, err = sluice.Execute[int](t.Context(), g, nil)
		assert.ErrorContains(t, err, "sluice: nil context or function", name)
		var c sluice.Call
		err = g.Begin(nilCtx, &c)
		assert.ErrorContains(t, err, "sluice: nil context or function", name)
		assert.NotErrorIs(t, err, sluice.ErrRejected, name)
		assert.ErrorContains(t, c.End(err), "sluice: nil context or function", name)
	}
	assert.Empty(t, r.admits)
	assert.Empty(t, r.doneCalls())
}

// Begin writes into the Call it is given: a nil one is an error, and so is
// one begun and not ended, which is left as it is, its policies' tickets
// with it. An ended Call begins again.
func TestBeginRefusesANilOrLiveCall(t *testing.T) {
	r := newRecorder("r", 5)
	g := mustGuard(t, sluice.With(r))
	assert.ErrorContains(t, g.Begin(t.Context(), nil), "sluice: Begin with a nil Call or one not yet ended")
	assert.Empty(t, r.admits)

	var c sluice.Call
	require.NoError(t, g.Begin(t.Context(), &c))
	err := g.Begin(t.Context(), &c)
	assert.ErrorContains(t, err, "sluice: Begin with a nil Call or one not yet ended")
	assert.NotErrorIs(t, err, sluice.ErrRejected)
	assert.Len(t, r.admits, 1, "the second Begin asked no policy")
	assert.Equal(t, "r", c.Decision().Policy, "the live call is left as it was")
	// The refusal, ended as Begin's example ends any error, ends nothing:
	// no policy hears of it, and no fallback answers it.
	assert.Same(t, err, c.End(err))
	assert.Same(t, err, c.Report(sluice.Failure, err))
	assert.Empty(t, r.doneCalls())
	r2 := newRecorder("r2", 5)
	fb := mustGuard(t, sluice.With(r2), sluice.WithFallback(fbValue("page", "maintenance page")))
	var f sluice.Call
	require.NoError(t, fb.Begin(t.Context(), &f))
	err = fb.Begin(t.Context(), &f)
	assert.Same(t, err, f.End(err))
	assert.Empty(t, r2.doneCalls())
	require.NoError(t, f.End(nil))
	require.NoError(t, c.End(nil))
	require.Len(t, r.doneCalls(), 1)
	assert.Equal(t, sluice.Success, r.doneCalls()[0].outcome)

	require.NoError(t, g.Begin(t.Context(), &c), "an ended call begins again")
	require.NoError(t, c.End(nil))
	assert.Len(t, r.admits, 2)
	assert.Len(t, r.doneCalls(), 2)

	// Nothing of an earlier call stays: its rejection, its deadline.
	refuse := mustGuard(t, sluice.With(newRecorder("refuse", 0)), sluice.WithTimeout(time.Hour))
	require.ErrorIs(t, refuse.Begin(t.Context(), &c), sluice.ErrRateLimited)
	_ = c.End(sluice.ErrRateLimited)
	timed := mustGuard(t, sluice.With(newRecorder("timed", -1)), sluice.WithTimeout(time.Hour))
	require.NoError(t, timed.Begin(t.Context(), &c))
	_, ok := c.Context().Deadline()
	assert.True(t, ok)
	require.NoError(t, c.End(nil))
	type nextKey struct{}
	ctx := context.WithValue(t.Context(), nextKey{}, "next")
	require.NoError(t, mustGuard(t, sluice.With(newRecorder("any", -1))).Begin(ctx, &c))
	assert.Equal(t, sluice.Decision{Allowed: true, Limit: -1}, c.Decision())
	assert.Same(t, ctx, c.Context())
	require.NoError(t, c.End(nil))
}

func TestNewValidates(t *testing.T) {
	_, err := sluice.New(sluice.With(nil))
	assert.ErrorContains(t, err, "policy 0 is nil")
	// The same policy twice in a chain would decide every call twice.
	r := newRecorder("r", 5)
	_, err = sluice.New(sluice.With(r, newRecorder("other", 5), r))
	assert.ErrorContains(t, err, "policy 2 (r) is policy 0 again")
	_, err = sluice.New(sluice.With(r), sluice.With(r))
	assert.Error(t, err, "given in two With")
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10)
	require.NoError(t, err)
	_, err = sluice.New(sluice.With(tb, tb))
	assert.Error(t, err)
	_, err = sluice.New(sluice.With(r, newRecorder("r", 5)))
	assert.NoError(t, err, "two policies of one name are two policies")
	_, err = sluice.New(sluice.WithClock(nil))
	assert.Error(t, err)
	_, err = sluice.New(sluice.WithClassifier(nil))
	assert.Error(t, err)
	g, err := sluice.New()
	require.NoError(t, err)
	assert.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))
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
	err := sluice.Rejection(sluice.Decision{Policy: "ratelimit/per-ip", RetryAfter: 1500 * time.Millisecond, Cause: sluice.ErrRateLimited})
	assert.Equal(t, "sluice: rate limited by ratelimit/per-ip; retry after 1.5s", err.Error())
	assert.Equal(t, 1500*time.Millisecond, rejection(t, err).RetryAfter)
	assert.Equal(t, sluice.CauseRateLimited, sluice.CauseOf(err))
	assert.Equal(t, "rate-limited", sluice.CauseOf(err).String())
	assert.Equal(t, sluice.CauseNone, sluice.CauseOf(errors.New("other")))
	assert.Equal(t, sluice.CauseOverloaded, sluice.CauseOf(fmt.Errorf("wrapped: %w", sluice.Rejection(sluice.Decision{Cause: sluice.ErrOverloaded}))))
	assert.Equal(t, "sluice: circuit open", sluice.Rejection(sluice.Decision{Cause: sluice.ErrCircuitOpen}).Error())
}

// A Guard's rejection error says how long to wait from the moment it is
// read: its RetryAfter and Reset count down on the Guard's clock, rounded up
// to the millisecond, and rejections whose answers agree to the millisecond
// share one error.
func TestRejectionRetryAfterCountsDown(t *testing.T) {
	clk := sluice.NewManualClock(time.Hour)
	limit := newRecorder("limit", 0) // rejects with RetryAfter 1s
	g := mustGuard(t, sluice.With(limit), sluice.WithClock(clk))
	err := g.Do(t.Context(), func(context.Context) error { return nil })
	assert.Equal(t, time.Second, rejection(t, err).RetryAfter)
	assert.Equal(t, "sluice: rate limited by limit; retry after 1s", err.Error())
	clk.Advance(300 * time.Millisecond)
	assert.Equal(t, 700*time.Millisecond, rejection(t, err).RetryAfter, "read 300ms later")
	assert.Equal(t, "sluice: rate limited by limit; retry after 700ms", err.Error())
	clk.Advance(2 * time.Second)
	assert.Zero(t, rejection(t, err).RetryAfter, "the instant has passed")

	// A rejection at an instant off the millisecond is rounded up to it.
	clk.Set(time.Hour + 400*time.Microsecond)
	err = g.Do(t.Context(), func(context.Context) error { return nil })
	assert.Equal(t, time.Second+600*time.Microsecond, rejection(t, err).RetryAfter)
	// Within the same millisecond, the answer agrees: the error is shared,
	// and read from the later instant.
	clk.Set(time.Hour + 700*time.Microsecond)
	err2 := g.Do(t.Context(), func(context.Context) error { return nil })
	assert.Same(t, err, err2)
	assert.Equal(t, time.Second+300*time.Microsecond, rejection(t, err2).RetryAfter)
	clk.Advance(time.Millisecond)
	err3 := g.Do(t.Context(), func(context.Context) error { return nil })
	assert.NotSame(t, err, err3, "a millisecond later the answer differs")
	assert.Equal(t, time.Second, rejection(t, err3).RetryAfter.Round(time.Millisecond))
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
	ctx := reqid.WithKeyAndResource(t.Context(), "alice", "GET /a")
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
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { ctxSink = reqid.WithKeyAndResource(base, "alice", "GET /a") }))
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
	assert.GreaterOrEqual(t, sluice.SystemClock.Now(), time.Duration(0))
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

func (w *waiting) Needs() sluice.Needs { return sluice.Waits | w.recorder.Needs() }

func (w *waiting) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
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

	var c sluice.Call

	err := g.Begin(t.Context(), &c)
	require.NoError(t, err)
	clk.Advance(100 * time.Millisecond)
	assert.NoError(t, c.Report(sluice.Released, nil))
	end := 1400 * time.Millisecond
	assert.Equal(t, []call{{1, sluice.Released, end, 400 * time.Millisecond}}, outer.doneCalls())
	assert.Equal(t, []call{{1, sluice.Released, end, 400 * time.Millisecond}}, queue.doneCalls(),
		"the waiting policy admitted at arrival")
	assert.Equal(t, []call{{1, sluice.Released, end, 100 * time.Millisecond}}, inner.doneCalls(),
		"the one after the wait admitted at its end")
}

// The same holds in a chain longer than a Call keeps inline, whose tickets
// and instants go to a slice of their own.
func TestGuardReleasedAfterAWaitInALongChainCarriesTheTimeSinceEachAdmit(t *testing.T) {
	clk := sluice.NewManualClock(time.Second)
	outer := newRecorder("outer", 5)
	queue := &waiting{recorder: newRecorder("queue", 5), clk: clk, wait: 300 * time.Millisecond}
	rest := []*recorder{newRecorder("r1", 5), newRecorder("r2", 5), newRecorder("r3", 5), newRecorder("r4", 5)}
	g := mustGuard(t, sluice.With(outer, queue, rest[0], rest[1], rest[2], rest[3]), sluice.WithClock(clk))

	var c sluice.Call

	err := g.Begin(t.Context(), &c)
	require.NoError(t, err)
	clk.Advance(100 * time.Millisecond)
	assert.NoError(t, c.Report(sluice.Released, nil))
	end := 1400 * time.Millisecond
	assert.Equal(t, []call{{1, sluice.Released, end, 400 * time.Millisecond}}, outer.doneCalls())
	assert.Equal(t, []call{{1, sluice.Released, end, 400 * time.Millisecond}}, queue.doneCalls())
	for _, r := range rest {
		assert.Equal(t, []call{{1, sluice.Released, end, 100 * time.Millisecond}}, r.doneCalls(), r.name)
	}
}

// A panic before the call ran (a policy's Admit) releases every policy
// that had admitted; none is left waiting for a Done.
func TestGuardPanicBeforeTheCallReleasesAdmittedPolicies(t *testing.T) {
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
func (panicky) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	panic("admit")
}
func (panicky) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (panicky) Needs() sluice.Needs                                              { return 0 }

// A call past its Guard's deadline is a timeout, and a Failure, even when
// what it returned wraps context.Canceled.
func TestTimeoutWrappingCanceledIsAFailure(t *testing.T) {
	err := &timeouterr.Error{After: time.Second, Err: fmt.Errorf("driver: %w", context.Canceled)}
	assert.Equal(t, sluice.Failure, sluice.DefaultClassifier(err))
	assert.Equal(t, sluice.Ignored, sluice.DefaultClassifier(fmt.Errorf("driver: %w", context.Canceled)))
}

// Begin gives the Decision, a rejection in the error, a panic in a policy's Admit releasing the ones before it,
// and allocates nothing.
func TestBeginRejectsAndReleases(t *testing.T) {
	clk := sluice.NewManualClock(0)
	limit := newRecorder("limit", 1)
	g := mustGuard(t, sluice.With(newRecorder("breaker", -1), limit), sluice.WithClock(clk))

	var c sluice.Call

	err := g.Begin(t.Context(), &c)
	require.NoError(t, err)
	assert.Equal(t, sluice.Decision{Allowed: true, Policy: "limit", Limit: 1, Remaining: 0}, c.Decision())
	clk.Advance(time.Second)
	assert.NoError(t, c.End(nil))
	assert.Equal(t, []call{{1, sluice.Success, time.Second, time.Second}}, limit.doneCalls())

	err = g.Begin(t.Context(), &c)
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
	d := c.Decision()
	assert.False(t, d.Allowed)
	assert.Equal(t, "limit", d.Policy)
	assert.Equal(t, d, rejection(t, err))
	assert.ErrorIs(t, c.End(err), sluice.ErrRateLimited)
	assert.Len(t, limit.doneCalls(), 1)

	outer := newRecorder("outer", 5)
	g2 := mustGuard(t, sluice.With(outer, panicky{}))
	assert.PanicsWithValue(t, "admit", func() { _ = g2.Begin(t.Context(), new(sluice.Call)) })
	require.Len(t, outer.doneCalls(), 1)
	assert.Equal(t, sluice.Released, outer.doneCalls()[0].outcome)
	assert.Equal(t, int64(5), outer.quota.Load())

	g3 := mustGuard(t, sluice.With(nopPolicy{"a"}, nopPolicy{"b"}))
	ctx := t.Context()
	if n := testing.AllocsPerRun(200, func() {
		var c sluice.Call
		err := g3.Begin(ctx, &c)
		_ = c.End(err)
	}); n != 0 {
		t.Fatalf("Begin and End allocate %v times per call, want 0", n)
	}
}

// overriding embeds a limiter and overrides its Admit.
type overriding struct {
	*ratelimit.TokenBucket
	calls int
}

func (o *overriding) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	o.calls++
	return 0, sluice.Quota{Limit: -1, RetryAfter: time.Second}, sluice.ErrRateLimited
}

// A policy that embeds another and overrides its Admit is asked through its
// own Admit, by every path of a Guard.
func TestGuardAsksAnEmbeddingPolicyThroughItsAdmit(t *testing.T) {
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10)
	require.NoError(t, err)
	o := &overriding{TokenBucket: tb}

	g := mustGuard(t, sluice.With(o))
	err = g.Do(t.Context(), func(context.Context) error { t.Fatal("the override rejects"); return nil })
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
	_, err = sluice.Execute(t.Context(), g, func(context.Context) (int, error) { t.Fatal("the override rejects"); return 0, nil })
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
	var c sluice.Call
	err = g.Begin(t.Context(), &c)
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
	assert.Equal(t, o.Name(), c.Decision().Policy)
	assert.Equal(t, 3, o.calls)

	keyed, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) { return &overriding{TokenBucket: tb}, nil })
	require.NoError(t, err)
	g2 := mustGuard(t, sluice.With(keyed))
	err = g2.Do(sluice.WithKey(t.Context(), "k"), func(context.Context) error { t.Fatal("the override rejects"); return nil })
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
}

// An open breaker's rejections share one error for its whole open spell:
// their answers, a RetryAfter to one instant and no Reset, agree.
func TestOpenBreakerRejectionsShareOneError(t *testing.T) {
	clk := sluice.NewManualClock(time.Second)
	br, err := breaker.New("dep", breaker.WithClock(clk))
	require.NoError(t, err)
	br.OpenFor(context.Background(), clk.Now(), time.Minute)
	g := mustGuard(t, sluice.With(br), sluice.WithClock(clk))
	first := g.Do(t.Context(), func(context.Context) error { return nil })
	assert.Equal(t, time.Minute, rejection(t, first).RetryAfter)
	for range 5 {
		clk.Advance(7*time.Second + 300*time.Microsecond)
		err := g.Do(t.Context(), func(context.Context) error { return nil })
		assert.Same(t, first, err)
		d := rejection(t, err)
		assert.Equal(t, time.Minute-(clk.Now()-time.Second), d.RetryAfter)
		assert.Zero(t, d.Reset)
	}
}

// A Guard reads its calls' resource when a policy declares NeedsResource, or
// it has an observer or a fallback: the client adapters name the resource
// in a call's context (an allocation) only then.
func TestGuardReadsResourceOnlyWhenSomethingDoes(t *testing.T) {
	reads := func(opts ...sluice.Option) bool {
		t.Helper()
		g, err := sluice.New(opts...)
		require.NoError(t, err)
		return guardhook.ReadsResource(g)
	}
	plain, keyed := newRecorder("plain", -1), newRecorder("keyed", -1)
	keyed.needs = sluice.NeedsResource | sluice.NeedsEnd
	assert.False(t, reads(), "no policy")
	assert.False(t, reads(sluice.With(plain)), "a policy that reads none")
	assert.True(t, reads(sluice.With(plain, keyed)), "a policy that declares it")
	assert.True(t, reads(sluice.With(plain), sluice.WithObserver(quiet{})), "an observer")
	assert.True(t, reads(sluice.With(plain), sluice.WithFallback(fbValue("a", "x"))), "a fallback")
	assert.False(t, guardhook.ReadsResource((*sluice.Guard)(nil)), "a nil Guard")
}

// A call whose caller canceled its context with a cause, and that returned
// the cause (as net/http does in place of context.Canceled), is Ignored as
// a canceled call is: the Classifier is handed an error that matches
// context.Canceled and unwraps to the cause. A call that fails with that
// error while its caller has not canceled it fails.
func TestCallerCanceledWithACauseIsIgnored(t *testing.T) {
	r := newRecorder("r", -1)
	var seen error
	g := mustGuard(t, sluice.With(r), sluice.WithClassifier(func(err error) sluice.Outcome {
		seen = err
		return sluice.DefaultClassifier(err)
	}))
	sibling := errors.New("a sibling call failed")
	ctx, cancel := context.WithCancelCause(t.Context())
	err := g.Do(ctx, func(ctx context.Context) error {
		cancel(sibling)
		return context.Cause(ctx)
	})
	assert.Same(t, sibling, err, "the caller gets the call's own error")
	assert.ErrorIs(t, seen, context.Canceled)
	assert.ErrorIs(t, seen, sibling)
	err = g.Do(t.Context(), func(context.Context) error { return sibling })
	assert.Same(t, sibling, err)
	require.Len(t, r.dones, 2)
	assert.Equal(t, sluice.Ignored, r.dones[0].outcome)
	assert.Equal(t, sluice.Failure, r.dones[1].outcome)
}

// Closing twice is harmless: a policy that is an io.Closer is closed once
// (io.Closer leaves a second Close undefined; one that closes a channel
// would panic).
func TestCloseTwiceClosesEachPolicyOnce(t *testing.T) {
	c := &closer{recorder: newRecorder("c", -1)}
	g, err := sluice.New(sluice.With(c))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.NoError(t, g.Close())
	assert.Equal(t, int32(1), c.closed.Load(), "a Guard closed twice closed its policy twice")
}

// Begin refuses a nil Call with an error that End and Report pass on
// untouched: Report does not read the nil Call.
func TestReportPassesOnBeginsRefusalOfANilCall(t *testing.T) {
	g := mustGuard(t, sluice.With(newRecorder("p", -1)))
	var c *sluice.Call
	err := g.Begin(t.Context(), c)
	require.Error(t, err)
	assert.Equal(t, err, c.End(err), "End passes it on")
	assert.NotPanics(t, func() { assert.Equal(t, err, c.Report(sluice.Failure, err)) }, "Report panics on the nil Call")
}

// forever rejects every call with the longest RetryAfter there is: a
// block-list policy telling the caller not to come back.
type forever struct{}

func (forever) Name() string                                                     { return "forever" }
func (forever) Needs() sluice.Needs                                              { return 0 }
func (forever) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (forever) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1, RetryAfter: math.MaxInt64}, sluice.ErrRateLimited
}

// A RetryAfter past what the Guard's clock can add (near math.MaxInt64)
// saturates: it is not read back as 0, as if the caller could retry at
// once.
func TestLongRetryAfterIsNotLost(t *testing.T) {
	clk := sluice.NewManualClock(time.Hour)
	g := mustGuard(t, sluice.With(forever{}), sluice.WithClock(clk))
	err := g.Do(t.Context(), func(context.Context) error { return nil })
	d := rejection(t, err)
	assert.Greater(t, d.RetryAfter, 100*365*24*time.Hour, "the Guard lost the policy's RetryAfter")
	assert.Contains(t, err.Error(), "retry after")
}

// errgroup's cause is the first error of the group: often a sibling's
// timeout through another Guard. A call canceled with that cause, which
// returned it (as net/http does), is the caller's cancel, not a failure (or
// a timeout) of what this Guard protects.
func TestCallerCanceledWithASiblingsTimeoutIsIgnored(t *testing.T) {
	other := mustGuard(t, sluice.With(newRecorder("o", -1)), sluice.WithTimeout(time.Millisecond))
	sibling := other.Do(t.Context(), func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	require.ErrorIs(t, sibling, sluice.ErrTimeout, "the sibling timed out")

	r := newRecorder("r", -1)
	g := mustGuard(t, sluice.With(r), sluice.WithObserver(&events{}))
	ctx, cancel := context.WithCancelCause(t.Context())
	err := g.Do(ctx, func(ctx context.Context) error {
		cancel(sibling)
		return context.Cause(ctx)
	})
	assert.Same(t, sibling, err)
	require.Len(t, r.dones, 1)
	assert.Equal(t, sluice.Ignored, r.dones[0].outcome, "the caller's cancel counted as a failure of the dependency")
	var n uint64
	for _, c := range g.Stats().Timeouts.Counts {
		n += c
	}
	assert.Zero(t, n, "counted as this Guard's timeout")
}

// countingClock counts its reads.
type countingClock struct {
	*sluice.ManualClock
	reads int
}

func (c *countingClock) Now() time.Duration { c.reads++; return c.ManualClock.Now() }

// A Guard whose queue (an adaptive Shedder has one by default) comes after
// another policy (a limiter, a breaker) reads its clock twice to admit a
// call, on arrival and after the queue: not before the queue too.
func TestAdmissionBeforeAQueueReadsTheClockTwice(t *testing.T) {
	clk := &countingClock{ManualClock: sluice.NewManualClock(time.Second)}
	queue := &waiting{recorder: newRecorder("queue", -1), clk: clk.ManualClock}
	g := mustGuard(t, sluice.With(newRecorder("limit", -1), queue), sluice.WithClock(clk))
	var c sluice.Call
	require.NoError(t, g.Begin(t.Context(), &c))
	assert.LessOrEqual(t, clk.reads, 2, "clock reads to admit one call")
	require.NoError(t, c.End(nil))
}
