package breaker_test

import (
	"context"
	"reflect"
	"runtime"
	"sync/atomic"
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

// A half-open breaker counts its probes against the new numbers: when they
// make the probes already counted decisive (2 successes of 2 needed), it
// decides at once; all the (fewer) probes it allows are taken, and no
// outcome would come to decide, leaving it rejecting every call for ever.
func TestReconfigureFewerProbesClosesOnSuccessesCounted(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithHalfOpenProbes(3, 1),
		breaker.WithOpenDuration(time.Second), breaker.WithClock(clk))
	ctx := context.Background()
	require.True(t, call(t, b, ctx, 0, F))
	require.Equal(t, breaker.StateOpen, b.State())
	v1 := policytest.AnswerOf(b.Admit(ctx, time.Second))
	v2 := policytest.AnswerOf(b.Admit(ctx, time.Second))
	require.NoError(t, v1.Cause)
	require.NoError(t, v2.Cause)
	b.Done(v1.Ticket, S, time.Second, 0)
	b.Done(v2.Ticket, S, time.Second, 0)
	require.Equal(t, breaker.StateHalfOpen, b.State(), "2 of the 3 successes needed")
	require.NoError(t, b.Reconfigure(breaker.WithConsecutiveFailures(1), breaker.WithHalfOpenProbes(2, 1),
		breaker.WithOpenDuration(time.Second)))
	// 2 successes of 2 probes: the breaker should close (at once or at the
	// next call); it must not reject for ever.
	for _, at := range []time.Duration{time.Second, time.Minute, time.Hour} {
		clk.Set(at)
		if call(t, b, ctx, at, S) {
			break
		}
	}
	assert.Equal(t, breaker.StateClosed, b.State(), "stuck half-open: every call rejected for ever")
}

// Same with failures: 2 failed probes of 3 at a ratio of 1/3 leave the
// breaker half-open; reconfigured to 2 probes that must all succeed, the
// failures already counted decide: it reopens, and probes again later.
func TestReconfigureFewerProbesReopensOnFailuresCounted(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithHalfOpenProbes(3, 1.0/3),
		breaker.WithOpenDuration(time.Second), breaker.WithClock(clk))
	ctx := context.Background()
	require.True(t, call(t, b, ctx, 0, F))
	v1 := policytest.AnswerOf(b.Admit(ctx, time.Second))
	v2 := policytest.AnswerOf(b.Admit(ctx, time.Second))
	require.NoError(t, v1.Cause)
	require.NoError(t, v2.Cause)
	b.Done(v1.Ticket, F, time.Second, 0)
	b.Done(v2.Ticket, F, time.Second, 0)
	require.Equal(t, breaker.StateHalfOpen, b.State())
	require.NoError(t, b.Reconfigure(breaker.WithConsecutiveFailures(1), breaker.WithHalfOpenProbes(2, 1),
		breaker.WithOpenDuration(time.Second)))
	// The failures decided: the breaker should reopen (at once or at the
	// next call) and probe again later; it must not reject for ever.
	admitted := false
	for _, at := range []time.Duration{time.Second, time.Minute, time.Hour} {
		clk.Set(at)
		if admitted = call(t, b, ctx, at, S); admitted {
			break
		}
	}
	assert.True(t, admitted, "stuck half-open: every call rejected for ever (state %v)", b.State())
}

// blockingOption wraps opt so that applying it signals entered and waits for
// release: it holds a Reconfigure between its start and its publication.
func blockingOption(opt breaker.Option, entered chan<- struct{}, release <-chan struct{}) breaker.Option {
	v := reflect.ValueOf(opt)
	return reflect.MakeFunc(v.Type(), func(args []reflect.Value) []reflect.Value {
		entered <- struct{}{}
		<-release
		return v.Call(args)
	}).Interface().(breaker.Option)
}

// Two Reconfigures of a throttle that overlap: the second, which changes
// the window, ends while the first is under way. The first must compare
// its window with the one in force, not with the configuration it read
// before: else it keeps the other's window (1s in 4 buckets) under its own
// configuration (10s in 10), and a later Reconfigure to 10s/10, comparing
// configurations, keeps the wrong window too.
func TestAdaptiveOverlappingReconfiguresLeaveNoStrayWindow(t *testing.T) {
	var draw atomic.Value
	draw.Store(0.999999)
	a := mustAdaptive(t, breaker.WithRandom(func() float64 { return draw.Load().(float64) }))
	entered, release := make(chan struct{}), make(chan struct{})
	aDone, bDone := make(chan error, 1), make(chan error, 1)
	go func() { aDone <- a.Reconfigure(blockingOption(breaker.WithMultiplier(2), entered, release)) }()
	<-entered // the first Reconfigure has started: it read the configuration (10s/10)
	go func() { bDone <- a.Reconfigure(breaker.WithRollingWindow(time.Second, 4)) }()
	// Let the second one finish while the first is held, if it can (a
	// Reconfigure that held a.mu throughout would wait for the first).
	var bErr error
	bFinished := false
	for i := 0; i < 100000 && !bFinished; i++ {
		select {
		case bErr = <-bDone:
			bFinished = true
		default:
			runtime.Gosched()
		}
	}
	close(release)
	require.NoError(t, <-aDone)
	if !bFinished {
		bErr = <-bDone
	}
	require.NoError(t, bErr)
	// Now, alone, back to the default window.
	require.NoError(t, a.Reconfigure())
	ctx := context.Background()
	for range 20 {
		require.True(t, call(t, a, ctx, 0, F))
	}
	assert.Positive(t, a.RejectProbability(5*time.Second), "20 failures 5s ago are in a 10s window")
	draw.Store(0.0)
	d, _ := admit(a, ctx, 0)
	require.False(t, d.Allowed)
	assert.Equal(t, time.Second, d.RetryAfter, "one bucket of the 10s/10 window")
}

// The same through a Group, whose listeners hear the change the
// Reconfigure made, outside the Group's lock: one that calls back into the
// Group does not deadlock.
func TestGroupReconfigureFewerProbesClosesAndTells(t *testing.T) {
	clk := sluice.NewManualClock(0)
	g := mustGroup(t, breaker.WithConsecutiveFailures(1), breaker.WithHalfOpenProbes(3, 1),
		breaker.WithOpenDuration(time.Second), breaker.WithClock(clk))
	var heard []string
	g.Subscribe(func(c sluice.StateChange) {
		g.Len() // back into the Group
		heard = append(heard, c.To)
	})
	fail(t, g, res("db"), 0)
	clk.Set(time.Second)
	for range 2 {
		d, tk := admit(g, res("db"), time.Second)
		require.True(t, d.Allowed)
		g.Done(tk, S, time.Second, 0)
	}
	b, ok := g.Get("db")
	require.True(t, ok)
	require.Equal(t, breaker.StateHalfOpen, b.State())
	require.NoError(t, g.Reconfigure(breaker.WithConsecutiveFailures(1), breaker.WithHalfOpenProbes(2, 1),
		breaker.WithOpenDuration(time.Second)))
	assert.Equal(t, breaker.StateClosed, b.State())
	assert.Equal(t, []string{"open", "half-open", "closed"}, heard)
}
