package breaker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
)

// A dependency that stops answering trips the default breaker by the stall
// check, and after 1 s its probe meets the same stalled dependency and
// hangs too. The hung probe counts as failed once the open duration has
// passed: the breaker opens again and probes again, and brings callers
// back once the dependency heals, rather than rejecting every call for as
// long as one call hangs.
func TestAHungProbeDoesNotHoldTheBreakerHalfOpen(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b, err := breaker.New("dep", breaker.WithClock(clk))
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(b), sluice.WithClock(clk))
	require.NoError(t, err)
	ctx := context.Background()
	// Healthy: 5 ms calls.
	for range 50 {
		var c sluice.Call
		require.NoError(t, g.Begin(ctx, &c))
		clk.Advance(5 * time.Millisecond)
		require.NoError(t, c.End(nil))
	}
	// The dependency stops answering: calls keep coming, none comes back.
	var hung []*sluice.Call
	for i := 0; i < 200 && b.State() == breaker.StateClosed; i++ {
		c := new(sluice.Call)
		if g.Begin(ctx, c) == nil {
			hung = append(hung, c)
		}
		clk.Advance(time.Millisecond)
	}
	require.Equal(t, breaker.StateOpen, b.State(), "the stall check opens it")
	// One second later a probe goes through, and hangs like the others.
	clk.Advance(time.Second)
	probe := new(sluice.Call)
	require.NoError(t, g.Begin(ctx, probe))
	require.Equal(t, breaker.StateHalfOpen, b.State())
	// The dependency heals 2 s later; callers keep coming, 10 a second, for 10 s.
	admitted := 0
	for range 100 {
		clk.Advance(100 * time.Millisecond)
		var c sluice.Call
		if g.Begin(ctx, &c) == nil {
			admitted++
			_ = c.End(nil)
		}
	}
	t.Logf("state after 10 s: %v, calls admitted: %d", b.State(), admitted)
	require.NotZero(t, admitted, "10 s on, the breaker must have probed again and let callers back")
	_ = probe.End(nil)
	for _, c := range hung {
		_ = c.End(context.DeadlineExceeded)
	}
}

// An error-ratio breaker (no stall check, so no usual latency learnt) with a
// 100 ms open duration in front of a dependency that answers in 300 ms: a
// probe 150 ms in is not hung, and its success closes the breaker.
func TestASlowProbeOfAnErrorRatioBreakerIsNotHung(t *testing.T) {
	ctx := context.Background()
	clk := sluice.NewManualClock(0)
	b, err := breaker.New("dep", breaker.WithClock(clk),
		breaker.WithErrorRatio(0.5, 10), breaker.WithCountWindow(20),
		breaker.WithOpenDuration(100*time.Millisecond))
	require.NoError(t, err)
	now := time.Second
	for range 10 {
		tk, _, err := b.Admit(ctx, now)
		require.NoError(t, err)
		b.Done(tk, sluice.Failure, now+300*time.Millisecond, 300*time.Millisecond)
		now += 10 * time.Millisecond
	}
	require.Equal(t, breaker.StateOpen, b.State())
	now += time.Second
	probe, _, err := b.Admit(ctx, now)
	require.NoError(t, err)
	require.Equal(t, breaker.StateHalfOpen, b.State())
	_, _, err = b.Admit(ctx, now+150*time.Millisecond)
	require.ErrorIs(t, err, sluice.ErrCircuitOpen)
	require.Equal(t, breaker.StateHalfOpen, b.State(), "a probe 150 ms in, of a 300 ms dependency, is not hung")
	b.Done(probe, sluice.Success, now+300*time.Millisecond, 300*time.Millisecond)
	require.Equal(t, breaker.StateClosed, b.State(), "the probe's success closes the breaker")
}

// A probe's age runs from its own admission, not from the instant the
// breaker turned half-open. The first probe is Released at once (a limiter
// behind the breaker refused it); the next call, 1.5 s later, takes the
// slot. 10 ms into that probe another call is rejected without counting
// the fresh probe as hung, and the probe's success closes the breaker.
func TestAProbeAdmittedLateIsNotHungAtOnce(t *testing.T) {
	ctx := context.Background()
	clk := sluice.NewManualClock(0)
	b, err := breaker.New("dep", breaker.WithClock(clk)) // 5 in a row, open 1 s, one probe
	require.NoError(t, err)
	now := time.Second
	now = failFive(t, b, now)
	require.Equal(t, breaker.StateOpen, b.State())
	now += 2 * time.Second
	first, _, err := b.Admit(ctx, now)
	require.NoError(t, err)
	b.Done(first, sluice.Released, now+time.Millisecond, time.Millisecond)
	require.Equal(t, breaker.StateHalfOpen, b.State())

	now += 1500 * time.Millisecond
	probe, _, err := b.Admit(ctx, now)
	require.NoError(t, err, "the slot given back takes a new probe")
	_, _, err = b.Admit(ctx, now+10*time.Millisecond)
	require.ErrorIs(t, err, sluice.ErrCircuitOpen)
	require.Equal(t, breaker.StateHalfOpen, b.State(), "a probe 10 ms old is not hung")
	b.Done(probe, sluice.Success, now+20*time.Millisecond, 20*time.Millisecond)
	require.Equal(t, breaker.StateClosed, b.State())
}

// The same with several probes: 3 probes, all needed. Calls are sparse:
// probes come 0.6 s apart; the third is 100 ms old when the next call
// comes, 1.3 s after the breaker turned half-open. It is not hung.
func TestSparseProbesAreNotHung(t *testing.T) {
	ctx := context.Background()
	clk := sluice.NewManualClock(0)
	b, err := breaker.New("dep", breaker.WithClock(clk), breaker.WithHalfOpenProbes(3, 1))
	require.NoError(t, err)
	now := time.Second
	now = failFive(t, b, now)
	now += 2 * time.Second
	for i := range 2 {
		tk, _, err := b.Admit(ctx, now+time.Duration(i)*600*time.Millisecond)
		require.NoError(t, err)
		b.Done(tk, sluice.Success, now+time.Duration(i)*600*time.Millisecond+20*time.Millisecond, 20*time.Millisecond)
	}
	third, _, err := b.Admit(ctx, now+1200*time.Millisecond)
	require.NoError(t, err)
	_, _, err = b.Admit(ctx, now+1300*time.Millisecond)
	require.ErrorIs(t, err, sluice.ErrCircuitOpen)
	require.Equal(t, breaker.StateHalfOpen, b.State(), "the third probe is 100 ms old: not hung")
	b.Done(third, sluice.Success, now+1320*time.Millisecond, 20*time.Millisecond)
	require.Equal(t, breaker.StateClosed, b.State())
}

// In a Group, a member whose probe hangs past its wait is idle as one
// without probes in flight is: an hour later, with no call of its key
// since, a new key at the full Group gets a breaker of its own, not the
// shared overflow one.
func TestAGroupDropsAMemberWhoseProbeHung(t *testing.T) {
	clk := sluice.NewManualClock(0)
	g, err := breaker.NewGroup("deps", breaker.WithClock(clk), breaker.WithMaxBreakers(1))
	require.NoError(t, err)
	a := sluice.WithResource(context.Background(), "a")
	now := time.Second
	for range 5 {
		tk, _, err := g.Admit(a, now)
		require.NoError(t, err)
		g.Done(tk, sluice.Failure, now+time.Millisecond, time.Millisecond)
		now += 2 * time.Millisecond
	}
	ba, ok := g.Get("a")
	require.True(t, ok)
	require.Equal(t, breaker.StateOpen, ba.State())
	now += 2 * time.Second
	_, _, err = g.Admit(a, now) // the probe, which hangs
	require.NoError(t, err)
	require.Equal(t, breaker.StateHalfOpen, ba.State())

	now += time.Hour
	_, _, err = g.Admit(sluice.WithResource(context.Background(), "b"), now)
	require.NoError(t, err)
	_, ok = g.Get("b")
	require.True(t, ok, "an hour after its probe hung, with no call of its key, member a is idle and must make room")
}

// A breaker with both the consecutive-failure and the slow-call strategies:
// calls up to 2 s are not slow, by the user's own word. Its dependency used
// to answer in 100 ms (the usual latency learnt), and comes back from an
// outage answering in 1.5 s: its first probe, within the slow-call
// threshold, is not hung at 1 s, and closes the breaker.
func TestAProbeWithinTheSlowCallThresholdIsNotHung(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b, err := breaker.New("dep", breaker.WithClock(clk),
		breaker.WithConsecutiveFailures(5),
		breaker.WithSlowCallRatio(2*time.Second, 0.9, 100),
		breaker.WithOpenDuration(time.Second))
	require.NoError(t, err)
	now := tripAfterUsual(t, b, time.Second) // a usual latency of 100 ms
	require.Equal(t, 1, probeRounds(t, b, now), "a probe of 1.5 s, within the 2 s slow-call threshold, was counted hung")
}

// probeRounds plays rounds of a probe that succeeds after 1.5 s, 3 s
// apart from now, with another caller 1.2 s into each, until the breaker
// closes; it returns how many it took.
func probeRounds(t *testing.T, b *breaker.Breaker, now time.Duration) int {
	t.Helper()
	ctx := context.Background()
	for round := 1; round <= 10; round++ {
		now += 3 * time.Second
		probe, _, err := b.Admit(ctx, now)
		require.NoError(t, err, "round %d", round)
		require.Equal(t, breaker.StateHalfOpen, b.State())
		_, _, _ = b.Admit(ctx, now+1200*time.Millisecond)
		b.Done(probe, sluice.Success, now+1500*time.Millisecond, 1500*time.Millisecond)
		if b.State() == breaker.StateClosed {
			return round
		}
	}
	t.Fatalf("10 probes of 1.5 s succeeded, and the breaker is %v: each was counted hung", b.State())
	return 0
}

// A dependency that used to answer in 100 ms comes back from an outage
// slower for good, answering in 1.5 s, and the breaker has no slow-call
// threshold: its first probe is taken for hung at 1 s, but the next waits
// twice as long, succeeds, and closes the breaker.
func TestADependencyBackSlowerIsNotTakenForHungForever(t *testing.T) {
	b, err := breaker.New("dep", breaker.WithClock(sluice.NewManualClock(0)), breaker.WithOpenDuration(time.Second))
	require.NoError(t, err)
	now := tripAfterUsual(t, b, time.Second) // a usual latency of 100 ms
	require.Equal(t, 2, probeRounds(t, b, now))
}

// Each hung probe makes the next wait twice as long, up to a bound (10 s,
// the longest open duration or the slow-call threshold): a dependency that
// keeps hanging still gets a probe that often, not one every few minutes.
func TestRepeatedlyHungProbesDoNotGrowTheWaitWithoutBound(t *testing.T) {
	ctx := context.Background()
	b, err := breaker.New("dep", breaker.WithClock(sluice.NewManualClock(0)), breaker.WithOpenDuration(time.Second))
	require.NoError(t, err)
	now := tripAfterUsual(t, b, time.Second) // a usual latency of 100 ms
	// From here every call hangs: admitted probes never end. A caller
	// every 100 ms for ten minutes.
	lastProbe, maxGap, probes := now, time.Duration(0), 0
	for end := now + 10*time.Minute; now < end; now += 100 * time.Millisecond {
		if _, _, err := b.Admit(ctx, now); err == nil {
			probes++
			maxGap = max(maxGap, now-lastProbe)
			lastProbe = now
		}
	}
	maxGap = max(maxGap, now-lastProbe)
	if maxGap > 30*time.Second {
		t.Fatalf("a dependency hung for 10 min got %d probes, up to %v apart: the probe wait doubles at every hung probe without bound", probes, maxGap)
	}
}

// tripAfterUsual learns a usual latency of 100 ms and trips b (5 in a row).
func tripAfterUsual(t *testing.T, b *breaker.Breaker, now time.Duration) time.Duration {
	t.Helper()
	ctx := context.Background()
	for range 20 {
		tk, _, err := b.Admit(ctx, now)
		require.NoError(t, err)
		b.Done(tk, sluice.Success, now+100*time.Millisecond, 100*time.Millisecond)
		now += 50 * time.Millisecond
	}
	for range 5 {
		tk, _, err := b.Admit(ctx, now)
		require.NoError(t, err)
		b.Done(tk, sluice.Failure, now+time.Millisecond, time.Millisecond)
		now += 50 * time.Millisecond
	}
	require.Equal(t, breaker.StateOpen, b.State())
	return now
}

// hangEveryProbe has a caller every 100 ms for d, every admitted probe hanging;
// it returns the gaps between probes and the instant it stopped.
func hangEveryProbe(b *breaker.Breaker, now, d time.Duration) ([]time.Duration, time.Duration) {
	var gaps []time.Duration
	last := time.Duration(-1)
	for end := now + d; now < end; now += 100 * time.Millisecond {
		if _, _, err := b.Admit(context.Background(), now); err == nil {
			if last >= 0 {
				gaps = append(gaps, now-last)
			}
			last = now
		}
	}
	return gaps, now
}

// Reset brings the breaker back to how New made it ("the backoff at its
// base"): the longer wait that hung probes built up is forgotten, as when
// a probe closes the breaker. After a Reset and a new
// trip, a hung probe is given up as soon as on a fresh breaker.
func TestResetForgetsTheHungProbeWait(t *testing.T) {
	fresh, err := breaker.New("dep", breaker.WithClock(sluice.NewManualClock(0)), breaker.WithOpenDuration(time.Second))
	require.NoError(t, err)
	now := tripAfterUsual(t, fresh, time.Second)
	want, _ := hangEveryProbe(fresh, now, 5*time.Second)
	require.NotEmpty(t, want)

	b, err := breaker.New("dep", breaker.WithClock(sluice.NewManualClock(0)), breaker.WithOpenDuration(time.Second))
	require.NoError(t, err)
	now = tripAfterUsual(t, b, time.Second)
	_, now = hangEveryProbe(b, now, 2*time.Minute) // hung probes: the wait grows to its bound
	b.Reset()
	now = tripAfterUsual(t, b, now)
	got, _ := hangEveryProbe(b, now, 15*time.Second)
	require.NotEmpty(t, got, "no second probe within 15 s of a trip after Reset")
	require.Equal(t, want[0], got[0], "after Reset, the first hung probe is given up after %v, on a fresh breaker after %v", got[0], want[0])
}

// failFive ends five calls of b in a row as failures from now, 2 ms apart,
// which trips a breaker at its defaults; it returns the instant after.
func failFive(t *testing.T, b interface {
	Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error)
	Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration)
}, now time.Duration) time.Duration {
	t.Helper()
	for range 5 {
		tk, _, err := b.Admit(context.Background(), now)
		require.NoError(t, err)
		b.Done(tk, sluice.Failure, now+time.Millisecond, time.Millisecond)
		now += 2 * time.Millisecond
	}
	return now
}
