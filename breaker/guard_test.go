package breaker_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/policytest"
	"github.com/sluice-go/sluice/ratelimit"
)

// rejectMost is a test policy standing in for a rate limiter: it rejects
// every call but one in ten.
type rejectMost struct{ n atomic.Int64 }

func (*rejectMost) Name() string { return "test/reject-most" }

func (r *rejectMost) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if r.n.Add(1)%10 != 0 {
		return 0, sluice.Quota{Limit: 10, RetryAfter: time.Second}, sluice.ErrRateLimited
	}
	return 0, sluice.Quota{Limit: 10, Remaining: 1}, nil
}

func (*rejectMost) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

func (*rejectMost) Needs() sluice.Needs { return 0 }

func TestGuardInnerRejectionsNeverTrip(t *testing.T) {
	clk := sluice.NewManualClock(0)
	// The most sensitive breaker: one failure opens it.
	b := mustNew(t, breaker.WithClock(clk), breaker.WithConsecutiveFailures(1), breaker.WithErrorRatio(0.01, 1))
	var changes []sluice.StateChange
	defer b.Subscribe(func(c sluice.StateChange) { changes = append(changes, c) })()
	g, err := sluice.New(sluice.With(b, &rejectMost{}), sluice.WithClock(clk))
	require.NoError(t, err)
	defer g.Close()
	ctx := context.Background()
	ran, limited := 0, 0
	for range 1000 {
		clk.Advance(ms)
		err := g.Do(ctx, func(context.Context) error { ran++; return nil })
		if errors.Is(err, sluice.ErrRateLimited) {
			limited++
		} else {
			require.NoError(t, err)
		}
	}
	assert.Equal(t, 100, ran)
	assert.Equal(t, 900, limited)
	assert.Equal(t, breaker.StateClosed, b.State())
	assert.Equal(t, breaker.Counts{Requests: 100, Successes: 100}, b.Counts())
	assert.Empty(t, changes)
}

func TestGuardIgnoresCancellationAndRejections(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := mustNew(t, breaker.WithClock(clk), breaker.WithConsecutiveFailures(1))
	g, err := sluice.New(sluice.With(b), sluice.WithClock(clk))
	require.NoError(t, err)
	ctx := context.Background()
	nested := sluice.Rejection(sluice.Decision{Policy: "other", Limit: -1, RetryAfter: sec, Cause: sluice.ErrOverloaded})
	for _, e := range []error{context.Canceled, nested, errors.Join(errors.New("wrapped"), context.Canceled)} {
		for range 5 {
			require.ErrorIs(t, g.Do(ctx, func(context.Context) error { return e }), e)
		}
	}
	assert.Equal(t, breaker.StateClosed, b.State())
	assert.Zero(t, b.Counts().Requests)
	require.Error(t, g.Do(ctx, func(context.Context) error { return errors.New("dependency down") }))
	assert.Equal(t, breaker.StateOpen, b.State())
	err = g.Do(ctx, func(context.Context) error { return nil })
	assert.ErrorIs(t, err, sluice.ErrCircuitOpen)
	assert.Equal(t, sluice.CauseCircuitOpen, sluice.CauseOf(err))
}

func TestGuardReleasedProbeFreesItsSlot(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := mustNew(t, breaker.WithClock(clk), breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec))
	inner := &rejectMost{}
	g, err := sluice.New(sluice.With(b, inner), sluice.WithClock(clk))
	require.NoError(t, err)
	ctx := context.Background()
	inner.n.Store(9) // the next call passes the inner policy
	require.Error(t, g.Do(ctx, func(context.Context) error { return errors.New("down") }))
	require.Equal(t, breaker.StateOpen, b.State())
	clk.Advance(sec)
	// Nine half-open probes in a row are rejected further in: each gives its
	// slot back, so the tenth still probes, and closes the breaker.
	for range 9 {
		require.ErrorIs(t, g.Do(ctx, func(context.Context) error { return nil }), sluice.ErrRateLimited)
		require.Equal(t, breaker.StateHalfOpen, b.State())
	}
	require.NoError(t, g.Do(ctx, func(context.Context) error { return nil }))
	assert.Equal(t, breaker.StateClosed, b.State())
}

func TestNeedsEndUnlessACountWindowOnSystemClock(t *testing.T) {
	assert.Zero(t, mustNew(t).Needs(), "the default: consecutive failures on a count window, whose stall check reads the clock itself")
	assert.Zero(t, mustNew(t, breaker.WithErrorRatio(0.5, 10)).Needs(), "a count window, no slow-call strategy")
	assert.Equal(t, sluice.NeedsEnd, mustNew(t, breaker.WithRollingWindow(10*sec, 10)).Needs())
	assert.Equal(t, sluice.NeedsEnd, mustNew(t, breaker.WithSlowCallRatio(ms, 0.5, 10)).Needs())
	assert.Equal(t, sluice.NeedsEnd, mustNew(t, breaker.WithClock(sluice.NewManualClock(0))).Needs())
	// A Group also reads each call's resource, its default key.
	g, err := breaker.NewGroup("g")
	require.NoError(t, err)
	assert.Equal(t, sluice.NeedsResource, g.Needs())
	g, err = breaker.NewGroup("g", breaker.WithErrorRatio(0.5, 10))
	require.NoError(t, err)
	assert.Equal(t, sluice.NeedsResource, g.Needs())
	g, err = breaker.NewGroup("g", breaker.WithRollingWindow(10*sec, 10))
	require.NoError(t, err)
	assert.Equal(t, sluice.NeedsEnd|sluice.NeedsResource, g.Needs())
	a := mustAdaptive(t)
	assert.Equal(t, sluice.NeedsEnd, a.Needs(), "the throttle counts a call in the window of its end")
}

// A Guard of untimed policies gives Done no end instant: the breaker reads
// the clock when it trips, and its open period starts then.
func TestGuardWithoutEndInstantOpensForTheWholeDuration(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	guard := func() (*sluice.Guard, *breaker.Breaker) {
		tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1_000_000), 1_000_000)
		require.NoError(t, err)
		b := mustNew(t, breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(time.Hour))
		g, err := sluice.New(sluice.With(tb, b))
		require.NoError(t, err)
		return g, b
	}
	retryAfter := func(g *sluice.Guard) time.Duration {
		t.Helper()
		err := g.Do(ctx, func(context.Context) error { t.Fatal("ran while open"); return nil })
		return rejection(t, err).RetryAfter
	}

	g, _ := guard()
	for range 2 {
		require.ErrorIs(t, g.Do(ctx, func(context.Context) error { return boom }), boom)
	}
	assert.InDelta(t, float64(time.Hour), float64(retryAfter(g)), float64(time.Minute))

	// A probe that fails opens it again, from the probe's end.
	g, b := guard()
	b.OpenFor(ctx, monoclock.Now(), time.Nanosecond)
	require.ErrorIs(t, g.Do(ctx, func(context.Context) error { return boom }), boom)
	assert.InDelta(t, float64(time.Hour), float64(retryAfter(g)), float64(time.Minute))
}

func TestConformance(t *testing.T) {
	t.Run("Breaker", func(t *testing.T) {
		policytest.Run(t, policytest.Config{
			New: func(t *testing.T) sluice.Policy {
				return mustNew(t, breaker.WithErrorRatio(0.1, 10), breaker.WithCountWindow(20),
					breaker.WithOpenDuration(5*ms), breaker.WithHalfOpenProbes(3, 0.6))
			},
			Causes:            []error{sluice.ErrCircuitOpen},
			UntimedReadsClock: true,
		})
	})
	t.Run("BreakerRolling", func(t *testing.T) {
		policytest.Run(t, policytest.Config{
			New: func(t *testing.T) sluice.Policy {
				return mustNew(t, breaker.WithRollingWindow(50*ms, 5), breaker.WithConsecutiveFailures(2),
					breaker.WithSlowCallRatio(ms, 0.5, 5), breaker.WithBackoff(2*ms, 20*ms))
			},
			Causes:  []error{sluice.ErrCircuitOpen},
			Latency: 2 * ms,
		})
	})
	t.Run("Adaptive", func(t *testing.T) {
		policytest.Run(t, policytest.Config{
			New: func(t *testing.T) sluice.Policy {
				a, err := breaker.NewAdaptive("adaptive", breaker.WithMultiplier(1.5),
					breaker.WithRollingWindow(100*ms, 10), breaker.WithRandom(lockedRandom(1)))
				require.NoError(t, err)
				return a
			},
			Causes:  []error{sluice.ErrCircuitOpen},
			Random:  true,
			Outcome: func(i int) sluice.Outcome { return []sluice.Outcome{F, F, S, F}[i%4] },
		})
	})
	t.Run("Group", func(t *testing.T) {
		policytest.Run(t, policytest.Config{
			New: func(t *testing.T) sluice.Policy {
				g, err := breaker.NewGroup("group", breaker.WithMaxBreakers(3),
					breaker.WithErrorRatio(0.1, 5), breaker.WithOpenDuration(3*ms))
				require.NoError(t, err)
				return g
			},
			Causes:            []error{sluice.ErrCircuitOpen},
			UntimedReadsClock: true,
		})
	})
}

// lockedRandom returns a seeded source of floats in [0, 1), safe for
// concurrent use.
func lockedRandom(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, 2))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// A dependency answering in 100 µs, 16 calls in flight: a pause of the
// process that holds every answer back 20 ms is no stall, nor is a pause of
// the whole machine (no call comes either) of 40 ms; answers that stay away
// past 25 ms while calls keep coming are one, well before five calls fail.
func TestStallCheckIgnoresAPauseOfTheProcess(t *testing.T) {
	for _, c := range []struct {
		name  string
		pause time.Duration
		calls bool // calls keep coming during the pause
		opens bool
	}{
		{"answers held 20 ms", 20 * ms, true, false},
		{"answers held 30 ms", 30 * ms, true, true},
		{"machine paused 40 ms", 40 * ms, false, false},
	} {
		b := mustNew(t)
		ctx := context.Background()
		now := sec
		now = learnUsual(t, b, now)
		for range 16 { // admitted, and held back by the pause
			require.NoError(t, policytest.AnswerOf(b.Admit(ctx, now)).Cause)
		}
		end, refused := now+c.pause, false
		if c.calls {
			for now+2*ms < end { // calls keep coming, none answered
				now += 2 * ms
				refused = refused || policytest.AnswerOf(b.Admit(ctx, now)).Cause != nil
			}
		}
		now = end
		refused = refused || policytest.AnswerOf(b.Admit(ctx, now)).Cause != nil
		assert.Equal(t, c.opens, refused, c.name)
		assert.Equal(t, c.opens, b.State() == breaker.StateOpen, c.name)
	}
}

// After a probe closes the breaker, the stall check waits for a success in
// the closed spell: the dependency has just come back and may answer its
// first calls slowly. Once one has succeeded, the check is on again.
func TestStallCheckWaitsForASuccessAfterClosing(t *testing.T) {
	b := mustNew(t)
	ctx := context.Background()
	now := sec
	now = learnUsual(t, b, now)
	for b.State() == breaker.StateClosed { // fail until it opens
		v := policytest.AnswerOf(b.Admit(ctx, now))
		require.NoError(t, v.Cause)
		now += ms
		b.Done(v.Ticket, F, now, ms)
	}
	now += 2 * sec // past the open period: the next call is a probe
	v := policytest.AnswerOf(b.Admit(ctx, now))
	require.NoError(t, v.Cause)
	now += ms
	b.Done(v.Ticket, S, now, ms)
	require.Equal(t, breaker.StateClosed, b.State())

	held := func() (refused bool) { // 40 ms of calls, none answered
		var first sluice.Ticket
		for i := range 20 {
			v := policytest.AnswerOf(b.Admit(ctx, now))
			if v.Cause != nil {
				return true
			}
			if i == 0 {
				first = v.Ticket
			}
			now += 2 * ms
		}
		b.Done(first, S, now, 40*ms)
		return false
	}
	assert.False(t, held(), "refused before a success ended in the closed spell")
	assert.True(t, held(), "not refused once one had")
}

// Told latency -1 (a Guard of untimed policies, as the default breaker's
// is), the stall check reads the end of a success on the breaker's clock:
// it learns the call's true latency, and refuses a stall only past twice
// that.
func TestStallCheckLearnsWithoutTheEndInstant(t *testing.T) {
	clk := sluice.NewManualClock(sec)
	b := mustNew(t, breaker.WithClock(clk))
	ctx := context.Background()
	v := policytest.AnswerOf(b.Admit(ctx, sec))
	require.NoError(t, v.Cause)
	clk.Set(sec + 20*ms)
	b.Done(v.Ticket, S, sec, -1) // the admission instant, as an untimed Guard tells it
	now := 2 * sec
	stalledFor := func(d time.Duration) bool { // calls every 2 ms, none answered
		for end := now + d; now <= end; now += 2 * ms {
			if policytest.AnswerOf(b.Admit(ctx, now)).Cause != nil {
				return true
			}
		}
		return false
	}
	assert.False(t, stalledFor(34*ms), "refused before twice the 20 ms it learnt")
	assert.True(t, stalledFor(10*ms), "not refused past twice the 20 ms it learnt")
	assert.Equal(t, breaker.StateOpen, b.State())
}

// Told latency -1, the stall check samples the first call of a tick, chosen
// when it was admitted, not the first to end: a quicker call that ends
// first is not what it learns.
func TestStallCheckSamplesByAdmission(t *testing.T) {
	clk := sluice.NewManualClock(sec)
	b := mustNew(t, breaker.WithClock(clk))
	ctx := context.Background()
	slow := policytest.AnswerOf(b.Admit(ctx, sec))       // the first of its tick
	quick := policytest.AnswerOf(b.Admit(ctx, sec+ms/4)) // the same tick
	clk.Set(sec + 2*ms)
	b.Done(quick.Ticket, S, sec+ms/4, -1) // ends first, after 1.75 ms
	clk.Set(sec + 30*ms)
	b.Done(slow.Ticket, S, sec, -1) // 30 ms
	now := 2 * sec
	for end := now + 50*ms; now <= end; now += 2 * ms {
		require.NoError(t, policytest.AnswerOf(b.Admit(ctx, now)).Cause, "refused %v into a stall: it learnt the quick call", now-2*sec)
	}
}

// learnUsual has b admit and end 100 calls of 100 µs, 2 ms apart from now,
// so that its stall check learns that latency, and returns the instant after.
func learnUsual(t *testing.T, b *breaker.Breaker, now time.Duration) time.Duration {
	t.Helper()
	for range 100 {
		v := policytest.AnswerOf(b.Admit(context.Background(), now))
		require.NoError(t, v.Cause)
		now += 2 * ms
		b.Done(v.Ticket, S, now, 100*time.Microsecond)
	}
	return now
}
