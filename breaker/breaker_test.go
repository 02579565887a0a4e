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

const (
	ms  = time.Millisecond
	sec = time.Second
)

var (
	S = sluice.Success
	F = sluice.Failure
	I = sluice.Ignored
	R = sluice.Released
)

// admit asks p to admit a request at now, and returns the Decision its
// answer stands for and its Ticket.
func admit(p sluice.Policy, ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	return policytest.Admit(ctx, p, now)
}

// rejection returns the Decision of the rejection err, failing t when err
// is none.
func rejection(t testing.TB, err error) sluice.Decision {
	t.Helper()
	d, ok := sluice.RejectionOf(err)
	require.True(t, ok, "%v is no rejection", err)
	require.ErrorIs(t, err, sluice.ErrRejected)
	return d
}

// sameRejection fails t unless err is the rejection with Decision want, as
// a Guard's shared error reads it: RetryAfter and Reset rounded up to the
// millisecond from the rejection's instant, and read from a later one.
func sameRejection(t testing.TB, want sluice.Decision, err error, msgAndArgs ...any) {
	t.Helper()
	got := rejection(t, err)
	for _, d := range [][2]time.Duration{{want.RetryAfter, got.RetryAfter}, {want.Reset, got.Reset}} {
		require.InDelta(t, float64(d[0]), float64(d[1]), float64(time.Millisecond), msgAndArgs...)
	}
	got.RetryAfter, got.Reset = want.RetryAfter, want.Reset
	require.Equal(t, want, got, msgAndArgs...)
}

// step is one call of a state-machine table: it arrives at instant at, ends
// latency later with outcome o, and the breaker is then in state want.
type step struct {
	at      time.Duration
	o       sluice.Outcome
	latency time.Duration
	want    breaker.State
	reject  bool // the call must be rejected (o and latency unused)
}

func runSteps(t *testing.T, b *breaker.Breaker, steps []step) {
	t.Helper()
	ctx := context.Background()
	for i, st := range steps {
		d, tk := admit(b, ctx, st.at)
		if st.reject {
			require.False(t, d.Allowed, "step %d at %v: want a rejection", i, st.at)
			require.ErrorIs(t, d.Cause, sluice.ErrCircuitOpen)
			require.Positive(t, d.RetryAfter)
		} else {
			require.True(t, d.Allowed, "step %d at %v: want the call admitted, got %+v", i, st.at, d)
			b.Done(tk, st.o, st.at+st.latency, st.latency)
		}
		require.Equal(t, st.want, b.State(), "step %d at %v", i, st.at)
	}
}

// seq builds steps one millisecond apart from outcomes, all expected closed
// except the last, expected in state last.
func seq(outcomes []sluice.Outcome, last breaker.State) []step {
	steps := make([]step, len(outcomes))
	for i, o := range outcomes {
		steps[i] = step{at: time.Duration(i) * ms, o: o, want: breaker.StateClosed}
	}
	steps[len(steps)-1].want = last
	return steps
}

func repeat(o sluice.Outcome, n int) []sluice.Outcome {
	out := make([]sluice.Outcome, n)
	for i := range out {
		out[i] = o
	}
	return out
}

func cat(parts ...[]sluice.Outcome) []sluice.Outcome {
	var out []sluice.Outcome
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func mustNew(t testing.TB, opts ...breaker.Option) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New("test", opts...)
	require.NoError(t, err)
	return b
}

func TestStrategiesTripExactlyAtThreshold(t *testing.T) {
	slow := func(n int) []step { // n slow successes, 1ms apart, latency 150ms
		s := make([]step, n)
		for i := range s {
			s[i] = step{at: time.Duration(i) * ms, o: S, latency: 150 * ms}
		}
		return s
	}
	fast := func(from, n int) []step {
		s := make([]step, n)
		for i := range s {
			s[i] = step{at: time.Duration(from+i) * ms, o: S, latency: 100 * ms}
		}
		return s
	}
	lastOpen := func(s []step) []step { s[len(s)-1].want = breaker.StateOpen; return s }

	tests := []struct {
		name  string
		opts  []breaker.Option
		steps []step
	}{
		{"default: 5 consecutive failures", nil,
			seq(cat(repeat(F, 4), repeat(S, 1), repeat(F, 5)), breaker.StateOpen)},
		{"consecutive: a success ends the run", []breaker.Option{breaker.WithConsecutiveFailures(3)},
			seq(cat(repeat(F, 2), repeat(S, 1), repeat(F, 2), repeat(I, 3), repeat(R, 3), repeat(F, 1)), breaker.StateOpen)},
		{"consecutive 1", []breaker.Option{breaker.WithConsecutiveFailures(1)},
			seq(cat(repeat(S, 10), repeat(F, 1)), breaker.StateOpen)},
		{"error ratio: not before the minimum volume", []breaker.Option{breaker.WithErrorRatio(0.5, 4)},
			seq(cat(repeat(F, 3), repeat(S, 1)), breaker.StateOpen)},
		{"error ratio: exactly at the ratio", []breaker.Option{breaker.WithErrorRatio(0.5, 4)},
			// 1/4, 2/5 stay closed; 3/6 = 50% trips.
			seq(cat(repeat(S, 3), repeat(F, 3)), breaker.StateOpen)},
		{"error ratio 0.1 of 30 with float-unfriendly numbers", []breaker.Option{breaker.WithErrorRatio(0.1, 30), breaker.WithCountWindow(30)},
			seq(cat(repeat(S, 27), repeat(F, 3)), breaker.StateOpen)},
		{"error ratio: ignored and released do not count", []breaker.Option{breaker.WithErrorRatio(0.5, 4)},
			seq(cat(repeat(F, 3), repeat(I, 5), repeat(R, 5), repeat(F, 1)), breaker.StateOpen)},
		{"error count: not before the minimum volume", []breaker.Option{breaker.WithErrorCount(3, 5)},
			seq(cat(repeat(F, 3), repeat(S, 2)), breaker.StateOpen)},
		{"error count: exactly at the count", []breaker.Option{breaker.WithErrorCount(3, 1)},
			seq(cat(repeat(S, 5), repeat(F, 1), repeat(S, 5), repeat(F, 2)), breaker.StateOpen)},
		{"error count: failures slide out of a count window", []breaker.Option{breaker.WithErrorCount(2, 4), breaker.WithCountWindow(4)},
			// F S S S S: the F leaves; then F F within the last 4 trips.
			seq(cat(repeat(F, 1), repeat(S, 4), repeat(F, 2)), breaker.StateOpen)},
		{"slow-call ratio: slow successes count", []breaker.Option{breaker.WithSlowCallRatio(100*ms, 0.5, 4)},
			// 3 slow (volume 3 < 4) then one fast: 3/4 ≥ 50%.
			lastOpen(append(slow(3), fast(3, 1)...))},
		{"slow-call ratio: exactly at the ratio, threshold exclusive", []breaker.Option{breaker.WithSlowCallRatio(100*ms, 0.5, 4)},
			// 100ms is not slower than 100ms: 4 fast, then slow ones: 2/6 closed... 4/8 trips.
			lastOpen(append(fast(0, 4), []step{
				{at: 10 * ms, o: F, latency: 101 * ms}, {at: 11 * ms, o: S, latency: 101 * ms},
				{at: 12 * ms, o: S, latency: 101 * ms}, {at: 13 * ms, o: S, latency: time.Hour},
			}...))},
		{"combination: whichever holds first", []breaker.Option{breaker.WithConsecutiveFailures(3), breaker.WithErrorRatio(0.5, 6)},
			seq(cat(repeat(F, 2), repeat(S, 1), repeat(F, 2), repeat(S, 1)), breaker.StateOpen)},
		{"combination: consecutive first", []breaker.Option{breaker.WithConsecutiveFailures(3), breaker.WithErrorRatio(0.9, 100)},
			seq(cat(repeat(S, 5), repeat(F, 3)), breaker.StateOpen)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustNew(t, tt.opts...)
			runSteps(t, b, tt.steps)
			// One step less would have stayed closed: the table pins that
			// every step but the last left the breaker closed.
		})
	}
}

func TestRollingWindowStrategies(t *testing.T) {
	t.Run("error count over 10s in 10 buckets", func(t *testing.T) {
		b := mustNew(t, breaker.WithRollingWindow(10*sec, 10), breaker.WithErrorCount(3, 3))
		runSteps(t, b, []step{
			{at: 0, o: F},
			{at: 5 * sec, o: F},
			{at: 10*sec + 500*ms, o: F}, // the failure at 0 has left the window
			{at: 11 * sec, o: F, want: breaker.StateOpen},
		})
	})
	t.Run("error ratio minimum volume counts the window only", func(t *testing.T) {
		b := mustNew(t, breaker.WithRollingWindow(time.Second, 4), breaker.WithErrorRatio(0.5, 3))
		runSteps(t, b, []step{
			{at: 0, o: F},
			{at: 100 * ms, o: F},
			{at: 2 * sec, o: F},        // both earlier left: volume 1
			{at: 2*sec + 100*ms, o: S}, // 1/2
			{at: 2*sec + 200*ms, o: S}, // 1/3 with volume 3
			{at: 2*sec + 300*ms, o: F, want: breaker.StateOpen}, // 2/4
		})
	})
	t.Run("consecutive failures expire with the window", func(t *testing.T) {
		b := mustNew(t, breaker.WithRollingWindow(10*sec, 10), breaker.WithConsecutiveFailures(3))
		runSteps(t, b, []step{
			{at: 0, o: F},
			{at: 1 * sec, o: F},
			{at: 12 * sec, o: F}, // the run began 12s ago: it starts again
			{at: 13 * sec, o: F},
			{at: 14 * sec, o: F, want: breaker.StateOpen},
		})
	})
	t.Run("slow calls on a rolling window", func(t *testing.T) {
		b := mustNew(t, breaker.WithRollingWindow(10*sec, 5), breaker.WithSlowCallRatio(time.Second, 1, 2))
		runSteps(t, b, []step{
			{at: 0, o: S, latency: 2 * sec},
			{at: 20 * sec, o: F, latency: 3 * sec},
			{at: 21 * sec, o: S, latency: 2 * sec, want: breaker.StateOpen},
		})
	})
}

func TestCounts(t *testing.T) {
	b := mustNew(t, breaker.WithSlowCallRatio(sec, 1, 100), breaker.WithConsecutiveFailures(10))
	ctx := context.Background()
	for i, o := range []sluice.Outcome{S, F, S, I, R, F, F} {
		_, tk := admit(b, ctx, 0)
		lat := ms
		if i < 2 {
			lat = 2 * sec
		}
		b.Done(tk, o, lat, lat)
	}
	assert.Equal(t, breaker.Counts{Requests: 5, Successes: 2, Failures: 3, SlowCalls: 2, ConsecutiveFailures: 2}, b.Counts())
}

func TestStateString(t *testing.T) {
	assert.Equal(t, "closed", breaker.StateClosed.String())
	assert.Equal(t, "open", breaker.StateOpen.String())
	assert.Equal(t, "half-open", breaker.StateHalfOpen.String())
	assert.Equal(t, "state(9)", breaker.State(9).String())
}

func TestOptionsValidation(t *testing.T) {
	bad := map[string][]breaker.Option{
		"consecutive 0":             {breaker.WithConsecutiveFailures(0)},
		"ratio 0":                   {breaker.WithErrorRatio(0, 10)},
		"ratio above 1":             {breaker.WithErrorRatio(1.5, 10)},
		"ratio NaN":                 {breaker.WithErrorRatio(nanF(), 10)},
		"ratio min 0":               {breaker.WithErrorRatio(0.5, 0)},
		"count 0":                   {breaker.WithErrorCount(0, 1)},
		"count min 0":               {breaker.WithErrorCount(1, 0)},
		"slow threshold 0":          {breaker.WithSlowCallRatio(0, 0.5, 1)},
		"slow ratio 0":              {breaker.WithSlowCallRatio(sec, 0, 1)},
		"count window 0":            {breaker.WithCountWindow(0)},
		"count window huge":         {breaker.WithCountWindow(1 << 25)},
		"min above count window":    {breaker.WithCountWindow(10), breaker.WithErrorRatio(0.5, 11)},
		"count above count window":  {breaker.WithCountWindow(10), breaker.WithErrorCount(11, 1)},
		"buckets 0":                 {breaker.WithRollingWindow(sec, 0)},
		"bucket too short":          {breaker.WithRollingWindow(time.Microsecond, 2)},
		"open 0":                    {breaker.WithOpenDuration(0)},
		"backoff max below base":    {breaker.WithBackoff(sec, ms)},
		"probes 0":                  {breaker.WithHalfOpenProbes(0, 1)},
		"probe ratio 0":             {breaker.WithHalfOpenProbes(1, 0)},
		"nil clock":                 {breaker.WithClock(nil)},
		"adaptive option":           {breaker.WithMultiplier(2)},
		"group option":              {breaker.WithMaxBreakers(3)},
		"count and rolling window":  {breaker.WithCountWindow(10), breaker.WithRollingWindow(sec, 10)},
		"rolling and count window":  {breaker.WithRollingWindow(sec, 10), breaker.WithCountWindow(10)},
		"open duration and backoff": {breaker.WithOpenDuration(sec), breaker.WithBackoff(sec, 2*sec)},
		"backoff and open duration": {breaker.WithBackoff(sec, 2*sec), breaker.WithOpenDuration(sec)},
		"one option twice":          {breaker.WithErrorRatio(0.5, 10), breaker.WithErrorRatio(0.2, 10)},
		"random without jitter":     {breaker.WithRandom(func() float64 { return 0 })},
	}
	for name, opts := range bad {
		t.Run(name, func(t *testing.T) {
			b, err := breaker.New("x", opts...)
			assert.Error(t, err)
			assert.Nil(t, b)
		})
	}
	_, err := breaker.New("")
	assert.Error(t, err)
	_, err = breaker.New("x", breaker.WithMaxBreakers(3))
	assert.ErrorContains(t, err, "WithMaxBreakers does not apply to breaker.New")
	_, err = breaker.New("x", nil, breaker.WithCountWindow(10), breaker.WithErrorRatio(0.5, 10))
	assert.ErrorContains(t, err, "option 0 is nil")
	_, err = breaker.New("x", breaker.WithCountWindow(10), breaker.WithRollingWindow(sec, 10))
	assert.ErrorContains(t, err, "WithCountWindow and WithRollingWindow together")
	_, err = breaker.NewGroup("x", breaker.WithBackoff(sec, 2*sec), breaker.WithOpenDuration(sec))
	assert.ErrorContains(t, err, "WithOpenDuration and WithBackoff together")
	_, err = breaker.New("x", breaker.WithJitter(0.1), breaker.WithRandom(func() float64 { return 0 }))
	assert.NoError(t, err, "WithRandom draws the jitter")
}

func nanF() float64 { z := 0.0; return z / z }

func TestAllowExecute(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := mustNew(t, breaker.WithClock(clk), breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(sec),
		breaker.WithSlowCallRatio(100*ms, 1, 1))
	boom := errors.New("boom")
	require.NoError(t, b.Execute(func() error { return nil }))
	assert.Equal(t, int64(1), b.Counts().Successes)

	require.ErrorIs(t, b.Execute(func() error { return context.Canceled }), context.Canceled)
	assert.Equal(t, int64(1), b.Counts().Requests, "context.Canceled is ignored")

	pm, err := b.Allow()
	require.NoError(t, err)
	assert.True(t, pm.Decision().Allowed)
	clk.Advance(50 * ms)
	assert.Same(t, boom, pm.End(boom))
	assert.Equal(t, breaker.StateClosed, b.State())
	assert.Panics(t, func() { _ = b.Execute(func() error { panic("boom") }) })
	assert.Equal(t, breaker.StateOpen, b.State(), "a panic counts as a failure")

	err = b.Execute(func() error { t.Fatal("must not run"); return nil })
	assert.Equal(t, sec, rejection(t, err).RetryAfter)
	pm, err = b.Allow()
	assert.ErrorIs(t, err, sluice.ErrCircuitOpen)
	d := pm.Decision()
	assert.False(t, d.Allowed)
	assert.Equal(t, b.Name(), d.Policy)
	assert.Equal(t, sec, d.RetryAfter)
	assert.Equal(t, d, rejection(t, err))
	pm.Report(F, nil) // a rejected Call reports nothing
	assert.Equal(t, int64(2), b.Counts().Failures)

	clk.Advance(sec)
	pm, err = b.Allow()
	require.NoError(t, err)
	clk.Advance(150 * ms) // a slow probe fails
	pm.Report(S, nil)
	assert.Equal(t, breaker.StateOpen, b.State())
}

// A breaker that counts outcomes without the time (a count window, no
// slow-call strategy) lets its Call skip the end clock read; its open periods must
// still start when the tripping call ended, however long the process has
// run.
func TestPermitOpensForTheWholeDurationLongAfterStart(t *testing.T) {
	clk := sluice.NewManualClock(10 * time.Hour)
	b := mustNew(t, breaker.WithClock(clk), breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(sec))
	for range 2 {
		pm, err := b.Allow()
		require.NoError(t, err)
		pm.Report(F, nil)
	}
	require.Equal(t, breaker.StateOpen, b.State())
	_, err := b.Allow()
	assert.Equal(t, sec, rejection(t, err).RetryAfter)
	clk.Advance(sec - ms)
	_, err = b.Allow()
	assert.Equal(t, ms, rejection(t, err).RetryAfter, "still open a millisecond before the end")

	clk.Advance(ms)
	pm, err := b.Allow()
	require.NoError(t, err, "the probe")
	clk.Advance(300 * ms)
	pm.Report(F, nil)
	_, err = b.Allow()
	assert.Equal(t, sec, rejection(t, err).RetryAfter, "a failed probe opens from its end")

	clk.Advance(sec)
	require.NoError(t, b.Execute(func() error { return nil }))
	assert.Equal(t, breaker.StateClosed, b.State())
	for range 2 {
		_ = b.Execute(func() error { return errors.New("boom") })
	}
	clk.Advance(sec - ms)
	assert.Equal(t, ms, rejection(t, b.Execute(func() error { return nil })).RetryAfter, "Execute trips for the whole duration too")
}

func TestHotPathsDoNotAllocate(t *testing.T) {
	ctx := context.Background()
	for _, opts := range [][]breaker.Option{nil, {breaker.WithRollingWindow(10*sec, 10), breaker.WithErrorRatio(0.5, 20)}} {
		b := mustNew(t, opts...)
		now := time.Duration(0)
		assert.Zero(t, testing.AllocsPerRun(1000, func() {
			now += ms
			d, tk := admit(b, ctx, now)
			b.Done(tk, S, now, ms)
			_ = d
		}), "closed Admit+Done")
		assert.Zero(t, testing.AllocsPerRun(1000, func() {
			var pm sluice.Call
			_ = pm.End(b.AllowInto(&pm))
		}), "closed Allow+End")
	}
	b := mustNew(t)
	b.ForceOpen()
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		d, _ := admit(b, ctx, 0)
		_ = d
	}), "open Admit")
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		var pm sluice.Call
		_ = pm.End(b.AllowInto(&pm))
	}), "open Allow+End")
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		_ = b.Execute(func() error { return nil })
	}), "open Execute")
}

func TestCountsOnRollingWindowFollowTheClock(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := mustNew(t, breaker.WithClock(clk), breaker.WithRollingWindow(10*sec, 10), breaker.WithErrorRatio(0.9, 100))
	for range 3 {
		pm, err := b.Allow()
		require.NoError(t, err)
		pm.Report(F, nil)
	}
	clk.Advance(5 * sec)
	pm, err := b.Allow()
	require.NoError(t, err)
	pm.Report(S, nil)
	assert.Equal(t, breaker.Counts{Requests: 4, Successes: 1, Failures: 3, ConsecutiveFailures: 0}, b.Counts())
	clk.Advance(5 * sec) // the first three leave the window
	assert.Equal(t, breaker.Counts{Requests: 1, Successes: 1}, b.Counts())
	clk.Advance(time.Hour)
	assert.Zero(t, b.Counts())
}

func TestCountsTellTheTimeToTheNextProbe(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := mustNew(t, breaker.WithClock(clk), breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(sec))
	assert.Zero(t, b.Counts().NextProbe, "closed")
	for range 2 {
		pm, err := b.Allow()
		require.NoError(t, err)
		pm.Report(F, nil)
	}
	require.Equal(t, breaker.StateOpen, b.State())
	assert.Equal(t, sec, b.Counts().NextProbe)
	clk.Advance(300 * ms)
	assert.Equal(t, 700*ms, b.Counts().NextProbe)
	clk.Advance(sec)
	assert.Zero(t, b.Counts().NextProbe, "due: the next call probes")
	_, err := b.Allow()
	require.NoError(t, err)
	assert.Equal(t, breaker.StateHalfOpen, b.State())
	assert.Zero(t, b.Counts().NextProbe, "half-open")
	b.ForceOpen()
	assert.Zero(t, b.Counts().NextProbe, "forced open never probes")
}

// A ratio trips at exactly its count, however the float rounds: 2 failures
// of 3 at 2/3, 1 slow call of 6 at 1/6; and a ratio too small to count in
// parts per million still trips at one failure rather than turning off.
func TestRatioTripsAtExactlyTheRatio(t *testing.T) {
	t.Run("error ratio 2/3", func(t *testing.T) {
		b := mustNew(t, breaker.WithErrorRatio(2.0/3, 3), breaker.WithCountWindow(3))
		runSteps(t, b, []step{{at: 0, o: S}, {at: ms, o: F},
			{at: 2 * ms, o: F, want: breaker.StateOpen}})
	})
	t.Run("slow-call ratio 1/6", func(t *testing.T) {
		b := mustNew(t, breaker.WithSlowCallRatio(sec, 1.0/6, 6))
		runSteps(t, b, []step{{at: 0, o: S}, {at: ms, o: S}, {at: 2 * ms, o: S}, {at: 3 * ms, o: S},
			{at: 4 * ms, o: S}, {at: 5 * ms, o: S, latency: 2 * sec, want: breaker.StateOpen}})
	})
	t.Run("error ratio 1e-7", func(t *testing.T) {
		b := mustNew(t, breaker.WithErrorRatio(1e-7, 1))
		runSteps(t, b, []step{{at: 0, o: F, want: breaker.StateOpen}})
	})
	t.Run("error ratio 0.57 not before", func(t *testing.T) {
		// 0.57 is 569999.99… parts per million as a float: 56 failures of
		// 100 must not trip it; the next failure, pushing out a success,
		// makes 57 and must.
		b := mustNew(t, breaker.WithErrorRatio(0.57, 100), breaker.WithCountWindow(100))
		var steps []step
		for i := range 100 {
			o := F
			if i < 44 {
				o = S
			}
			steps = append(steps, step{at: time.Duration(i) * ms, o: o})
		}
		runSteps(t, b, steps)
		runSteps(t, b, []step{{at: 100 * ms, o: F, want: breaker.StateOpen}})
	})
}

// Counts reports no run once the run's first failure has left the rolling
// window, as the next failure would find it.
func TestCountsDropARunThatLeftTheWindow(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := mustNew(t, breaker.WithClock(clk), breaker.WithRollingWindow(10*sec, 10),
		breaker.WithConsecutiveFailures(5))
	for range 3 {
		pm, err := b.Allow()
		require.NoError(t, err)
		pm.Report(F, nil)
	}
	assert.Equal(t, int64(3), b.Counts().ConsecutiveFailures)
	clk.Advance(9 * sec)
	assert.Equal(t, int64(3), b.Counts().ConsecutiveFailures, "still in the window")
	clk.Advance(time.Hour)
	assert.Zero(t, b.Counts())
}

// A failure 2³¹ buckets after the last one (25 days of 1 ms buckets), whose
// epoch difference reads negative modulo 2³², starts a run of its own.
func TestRunAcrossTheEpochWrapStartsAgain(t *testing.T) {
	b := mustNew(t, breaker.WithRollingWindow(sec, 1000), breaker.WithConsecutiveFailures(2))
	runSteps(t, b, []step{
		{at: 0, o: F},
		{at: time.Duration(1<<31)*ms + 10*sec, o: F, want: breaker.StateClosed},
	})
}

// A Guard's classifier that panics on an error it did not expect leaves the
// call a failure, as a panicking call is: the probe it ran does not keep its
// slot, and the breaker is not held half-open for good.
func TestAPanickingClassifierEndsTheCall(t *testing.T) {
	clk := sluice.NewManualClock(0)
	odd := errors.New("odd")
	b := mustNew(t, breaker.WithClock(clk), breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec))
	g, err := sluice.New(sluice.With(b), sluice.WithClock(clk), sluice.WithClassifier(func(err error) sluice.Outcome {
		if errors.Is(err, odd) {
			panic("classifier")
		}
		return sluice.DefaultClassifier(err)
	}))
	require.NoError(t, err)
	ctx := context.Background()
	require.Error(t, g.Do(ctx, func(context.Context) error { return errors.New("boom") }))
	require.Equal(t, breaker.StateOpen, b.State())
	clk.Advance(sec)
	assert.PanicsWithValue(t, "classifier", func() { _ = g.Do(ctx, func(context.Context) error { return odd }) })
	assert.Equal(t, breaker.StateOpen, b.State(), "the probe failed")
	clk.Advance(sec)
	require.NoError(t, g.Do(ctx, func(context.Context) error { return nil }), "the next probe goes through")
	assert.Equal(t, breaker.StateClosed, b.State())
}
