package breaker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/policytest"
)

// call admits one call on b at now and ends it with o.
func call(t *testing.T, p sluice.Policy, ctx context.Context, now time.Duration, o sluice.Outcome) bool {
	t.Helper()
	v := policytest.AnswerOf(p.Admit(ctx, now))
	if v.Cause != nil {
		return false
	}
	p.Done(v.Ticket, o, now, 0)
	return true
}

func TestReconfigureKeepsCountsOfTheSameWindow(t *testing.T) {
	b := mustNew(t, breaker.WithErrorCount(4, 4), breaker.WithCountWindow(10))
	ctx := context.Background()
	for i := range 3 {
		require.True(t, call(t, b, ctx, time.Duration(i)*ms, F))
	}
	require.NoError(t, b.Reconfigure(breaker.WithErrorCount(3, 3), breaker.WithCountWindow(10)))
	assert.Equal(t, int64(3), b.Counts().Failures, "same window: counts kept")
	assert.Equal(t, breaker.StateClosed, b.State())
	require.True(t, call(t, b, ctx, 3*ms, S))
	assert.Equal(t, breaker.StateOpen, b.State(), "the lower threshold holds at the next outcome")
}

func TestReconfigureStartsANewWindowOfAnotherShape(t *testing.T) {
	b := mustNew(t, breaker.WithErrorCount(4, 4), breaker.WithCountWindow(10))
	ctx := context.Background()
	v := policytest.AnswerOf(b.Admit(ctx, 0)) // in flight across the change
	for i := range 3 {
		require.True(t, call(t, b, ctx, time.Duration(i)*ms, F))
	}
	require.NoError(t, b.Reconfigure(breaker.WithErrorCount(4, 4), breaker.WithCountWindow(20)))
	assert.Zero(t, b.Counts().Requests)
	b.Done(v.Ticket, F, 5*ms, 0)
	assert.Zero(t, b.Counts().Requests, "an outcome from before the new window is dropped")
	assert.Equal(t, breaker.StateClosed, b.State())
}

func TestReconfigureKeepsAnOpenBreakerOpen(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := mustNew(t, breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(time.Second), breaker.WithClock(clk))
	ctx := context.Background()
	require.True(t, call(t, b, ctx, 0, F))
	require.True(t, call(t, b, ctx, 0, F))
	require.Equal(t, breaker.StateOpen, b.State())
	require.NoError(t, b.Reconfigure(breaker.WithConsecutiveFailures(5), breaker.WithOpenDuration(10*time.Second),
		breaker.WithHalfOpenProbes(2, 1)))
	assert.Equal(t, breaker.StateOpen, b.State())
	assert.False(t, call(t, b, ctx, 500*ms, S), "still in its open spell")
	// The spell ends when it was set to; then the new numbers: 2 probes.
	v1, v2, v3 := policytest.AnswerOf(b.Admit(ctx, time.Second)), policytest.AnswerOf(b.Admit(ctx, time.Second)), policytest.AnswerOf(b.Admit(ctx, time.Second))
	require.NoError(t, v1.Cause)
	require.NoError(t, v2.Cause)
	require.Error(t, v3.Cause)
	b.Done(v1.Ticket, S, time.Second, 0)
	assert.Equal(t, breaker.StateHalfOpen, b.State(), "one success of the 2 needed")
	b.Done(v2.Ticket, S, time.Second, 0)
	assert.Equal(t, breaker.StateClosed, b.State())
}

func TestReconfigureRefusesWiringAndChangesOfNeeds(t *testing.T) {
	b := mustNew(t, breaker.WithConsecutiveFailures(3))
	for _, opts := range [][]breaker.Option{
		{breaker.WithClock(sluice.NewManualClock(0))},
		{breaker.WithRandom(func() float64 { return 0 })},
		{breaker.WithRollingWindow(10*time.Second, 10)},            // needs the end of a call, where a count window does not
		{breaker.WithConsecutiveFailures(0)},                       // bad number
		{breaker.WithCountWindow(10), breaker.WithCountWindow(20)}, // given twice
		{breaker.WithKeyFunc(func(context.Context) string { return "" })},
	} {
		require.Error(t, b.Reconfigure(opts...))
	}
	ctx := context.Background()
	for i := range 2 {
		require.True(t, call(t, b, ctx, time.Duration(i)*ms, F))
	}
	assert.Equal(t, breaker.StateClosed, b.State(), "still 3 in a row")
	require.True(t, call(t, b, ctx, 2*ms, F))
	assert.Equal(t, breaker.StateOpen, b.State())
}

func TestGroupReconfigureReachesHeldAndNewBreakers(t *testing.T) {
	g, err := breaker.NewGroup("g", breaker.WithConsecutiveFailures(3))
	require.NoError(t, err)
	at := func(r string) context.Context { return sluice.WithResource(context.Background(), r) }
	require.True(t, call(t, g, at("held"), 0, F))
	require.NoError(t, g.Reconfigure(breaker.WithConsecutiveFailures(2)))
	require.True(t, call(t, g, at("held"), ms, F))
	held, ok := g.Get("held")
	require.True(t, ok)
	assert.Equal(t, breaker.StateOpen, held.State(), "the run of 1 kept, 2 trips")
	require.True(t, call(t, g, at("new"), 0, F))
	require.True(t, call(t, g, at("new"), ms, F))
	fresh, ok := g.Get("new")
	require.True(t, ok)
	assert.Equal(t, breaker.StateOpen, fresh.State())
	require.Error(t, g.Reconfigure(breaker.WithMaxBreakers(5)))
}

func TestAdaptiveReconfigure(t *testing.T) {
	a, err := breaker.NewAdaptive("a", breaker.WithRandom(func() float64 { return 0 }), breaker.WithMinThrottleRequests(1000))
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 20 {
		require.True(t, call(t, a, ctx, time.Duration(i)*ms, F), "below the minimum of requests")
	}
	require.NoError(t, a.Reconfigure(breaker.WithMinThrottleRequests(10)))
	assert.Positive(t, a.RejectProbability(20*ms), "the counts stay, the minimum is met")
	assert.False(t, call(t, a, ctx, 20*ms, F))
	require.NoError(t, a.Reconfigure(breaker.WithRollingWindow(time.Second, 4), breaker.WithMinThrottleRequests(10)))
	assert.Zero(t, a.RejectProbability(20*ms), "a new window starts empty")
	require.Error(t, a.Reconfigure(breaker.WithMultiplier(0.5)))
	require.Error(t, a.Reconfigure(breaker.WithConsecutiveFailures(2)), "not an option of NewAdaptive")
}
