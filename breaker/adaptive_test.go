package breaker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/policytest"
)

func mustAdaptive(t testing.TB, opts ...breaker.Option) *breaker.Adaptive {
	t.Helper()
	a, err := breaker.NewAdaptive("sre", opts...)
	require.NoError(t, err)
	return a
}

func TestAdaptiveProbabilityFollowsTheFormula(t *testing.T) {
	draw := 0.999999 // never under p while recording
	a := mustAdaptive(t, breaker.WithMultiplier(2), breaker.WithRollingWindow(10*sec, 10),
		breaker.WithRandom(func() float64 { return draw }))
	ctx := context.Background()
	record := func(o sluice.Outcome, n int, at time.Duration) {
		for range n {
			d, tk := admit(a, ctx, at)
			require.True(t, d.Allowed)
			a.Done(tk, o, at, ms)
		}
	}
	record(S, 10, 0)
	record(F, 20, 0)
	// requests 30, accepts 10: (30 − 2·10)/(30+1) = 10/31.
	assert.InDelta(t, 10.0/31, a.RejectProbability(0), 1e-12)

	draw = 10.0/31 - 1e-9 // just under p: rejected
	d, _ := admit(a, ctx, 0)
	assert.False(t, d.Allowed)
	assert.ErrorIs(t, d.Cause, sluice.ErrCircuitOpen)
	assert.Equal(t, sec, d.RetryAfter, "one bucket")
	assert.Equal(t, int64(-1), d.Limit)
	// The rejection counts as a request: (31 − 20)/32.
	assert.InDelta(t, 11.0/32, a.RejectProbability(0), 1e-12)
	reqs, accs := a.Requests(0)
	assert.Equal(t, [2]int64{31, 10}, [2]int64{reqs, accs})

	draw = 11.0 / 32 // not under p: admitted
	d, tk := admit(a, ctx, 0)
	assert.True(t, d.Allowed)
	a.Done(tk, sluice.Released, 0, 0)
	a.Done(tk, sluice.Ignored, 0, 0)
	reqs, _ = a.Requests(0)
	assert.Equal(t, int64(31), reqs, "released and ignored calls are not counted")

	// The window moves on: everything left after 10s.
	assert.Zero(t, a.RejectProbability(10*sec))
}

func TestAdaptiveHealthyNeverRejects(t *testing.T) {
	a := mustAdaptive(t, breaker.WithRandom(func() float64 { return 0 }))
	ctx := context.Background()
	for i := range 1000 {
		now := time.Duration(i) * ms
		d, tk := admit(a, ctx, now)
		require.True(t, d.Allowed, "call %d", i)
		o := S
		if i%3 == 2 {
			o = F // a third failing: requests < 2·accepts still
		}
		a.Done(tk, o, now, ms)
	}
}

func TestAdaptiveMinRequests(t *testing.T) {
	a := mustAdaptive(t, breaker.WithMinThrottleRequests(5), breaker.WithRandom(func() float64 { return 0 }))
	ctx := context.Background()
	for i := range 4 {
		d, tk := admit(a, ctx, 0)
		require.True(t, d.Allowed, "call %d", i)
		a.Done(tk, F, 0, 0)
	}
	assert.Zero(t, a.RejectProbability(0))
	d, tk := admit(a, ctx, 0)
	require.True(t, d.Allowed)
	a.Done(tk, F, 0, 0)
	assert.InDelta(t, 5.0/6, a.RejectProbability(0), 1e-12)
	d, _ = admit(a, ctx, 0)
	assert.False(t, d.Allowed)
}

func TestAdaptiveExecute(t *testing.T) {
	clk := sluice.NewManualClock(0)
	a := mustAdaptive(t, breaker.WithClock(clk), breaker.WithRandom(func() float64 { return 0 }))
	boom := errors.New("boom")
	assert.ErrorIs(t, a.Execute(func() error { return boom }), boom)
	err := a.Execute(func() error { return nil })
	assert.ErrorIs(t, err, sluice.ErrCircuitOpen, "1 request, 0 accepts: p = 1/2 > 0")
	clk.Advance(time.Minute)
	assert.NoError(t, a.Execute(func() error { return nil }))
	reqs, accs := a.Requests(clk.Now())
	assert.Equal(t, [2]int64{1, 1}, [2]int64{reqs, accs})
}

func TestAdaptiveAdmitDoesNotAllocate(t *testing.T) {
	a := mustAdaptive(t, breaker.WithRandom(func() float64 { return 0.5 }))
	ctx := context.Background()
	now := time.Duration(0)
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		now += ms
		d, tk := admit(a, ctx, now)
		if d.Allowed {
			a.Done(tk, []sluice.Outcome{S, F, F, F}[now/ms%4], now, ms)
		}
	}))
}

func TestAdaptiveOptionsValidation(t *testing.T) {
	for name, opts := range map[string][]breaker.Option{
		"K below 1":      {breaker.WithMultiplier(0.5)},
		"K NaN":          {breaker.WithMultiplier(nanF())},
		"nil random":     {breaker.WithRandom(nil)},
		"negative min":   {breaker.WithMinThrottleRequests(-1)},
		"count window":   {breaker.WithCountWindow(10)},
		"breaker option": {breaker.WithConsecutiveFailures(3)},
		"group option":   {breaker.WithMaxBreakers(3)},
		"bad window":     {breaker.WithRollingWindow(0, 1)},
	} {
		_, err := breaker.NewAdaptive("a", opts...)
		assert.Error(t, err, name)
	}
	_, err := breaker.NewAdaptive("")
	assert.Error(t, err)
}

// TestAdaptiveAllowAgreesWithAdmit drives two throttles with the same
// seeded random source, one through Admit and Done and one through Allow
// and Report on its clock: they draw alike, so they must decide alike, call
// for call.
func TestAdaptiveAllowAgreesWithAdmit(t *testing.T) {
	clk := sluice.NewManualClock(0)
	mk := func(opts ...breaker.Option) *breaker.Adaptive {
		return mustAdaptive(t, append(opts, breaker.WithRollingWindow(100*ms, 10), breaker.WithRandom(lockedRandom(7)))...)
	}
	a, b := mk(), mk(breaker.WithClock(clk))
	ctx := context.Background()
	outcomes := []sluice.Outcome{F, F, S, F, sluice.Ignored, F, sluice.Released, S}
	var admitted, rejected int
	for i := range 3000 {
		now := time.Duration(i) * ms / 4
		clk.Set(now)
		da, ta := admit(a, ctx, now)
		call, err := b.Allow()
		db := call.Decision()
		require.Equal(t, da.Allowed, db.Allowed, "call %d at %v", i, now)
		require.Equal(t, da.Allowed, err == nil, "call %d at %v", i, now)
		if !da.Allowed {
			require.Equal(t, da, db, "call %d at %v", i, now)
			sameRejection(t, da, err, "call %d at %v", i, now)
			rejected++
			continue
		}
		admitted++
		o := outcomes[i%len(outcomes)]
		a.Done(ta, o, now+ms, ms)
		clk.Advance(ms)
		call.Report(o, nil)
	}
	assert.Positive(t, admitted)
	assert.Positive(t, rejected)
}

func TestAdaptiveAdmitsWithoutAllocating(t *testing.T) {
	a := mustAdaptive(t, breaker.WithRandom(func() float64 { return 0.5 }))
	ctx := context.Background()
	now := time.Duration(0)
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		now += ms
		v := policytest.AnswerOf(a.Admit(ctx, now))
		if v.Cause != nil || v.Limit != -1 {
			t.Fatalf("a healthy dependency's request was answered %+v", v)
		}
		a.Done(v.Ticket, S, now, ms)
	}))
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		var call sluice.Call
		if err := a.AllowInto(&call); err != nil {
			t.Fatalf("a healthy dependency's request was rejected: %v", err)
		}
		_ = call.End(nil)
	}))
}
