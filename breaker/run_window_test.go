package breaker_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/policytest"
)

// On a rolling window, a run whose first failure has left the window
// keeps the failures of it still in the window: an older failure before a
// burst cannot make the burst count for less.
func TestARunKeepsItsFailuresStillInTheWindow(t *testing.T) {
	run := func(t *testing.T, older bool) breaker.State {
		clk := sluice.NewManualClock(0)
		b, err := breaker.New("x", breaker.WithConsecutiveFailures(3),
			breaker.WithRollingWindow(time.Second, 10), breaker.WithClock(clk))
		require.NoError(t, err)
		fail := func(at time.Duration) {
			clk.Set(at)
			v := policytest.AnswerOf(b.Admit(context.Background(), at))
			require.NoError(t, v.Cause, "at %v", at)
			b.Done(v.Ticket, sluice.Failure, at, 0)
		}
		if older {
			fail(0)
		}
		fail(950 * time.Millisecond)
		fail(1000 * time.Millisecond)
		fail(1050 * time.Millisecond)
		return b.State()
	}
	require.Equal(t, breaker.StateOpen, run(t, false), "three failures in a row trip it")
	assert.Equal(t, breaker.StateOpen, run(t, true), "and still do after an older one")
}

// Numbers a breaker could never act on are refused: a run longer than it
// counts, more probes than it can weigh, a random source for a Group
// without the jitter that would draw from it.
func TestOptionsItCouldNeverActOnAreRefused(t *testing.T) {
	_, err := breaker.New("x", breaker.WithConsecutiveFailures(math.MaxUint32))
	assert.NoError(t, err)
	if math.MaxInt > math.MaxUint32 {
		_, err = breaker.New("x", breaker.WithConsecutiveFailures(math.MaxUint32+1))
		assert.ErrorContains(t, err, "WithConsecutiveFailures")
	}
	_, err = breaker.New("x", breaker.WithHalfOpenProbes(1<<24, 1))
	assert.NoError(t, err)
	_, err = breaker.New("x", breaker.WithHalfOpenProbes(math.MaxInt, 1))
	assert.ErrorContains(t, err, "WithHalfOpenProbes")
	_, err = breaker.NewGroup("x", breaker.WithRandom(func() float64 { return 0.5 }))
	assert.ErrorContains(t, err, "WithRandom without WithJitter")
}

// A Group full of open breakers whose keys went idle (hosts dropped from
// discovery) frees their slots: a new key gets a breaker of its own, not
// the shared overflow one that another key's failures opened.
func TestAGroupDropsOpenBreakersGoneIdle(t *testing.T) {
	clk := sluice.NewManualClock(0)
	g, err := breaker.NewGroup("g", breaker.WithMaxBreakers(2), breaker.WithConsecutiveFailures(1),
		breaker.WithOpenDuration(time.Second), breaker.WithClock(clk))
	require.NoError(t, err)
	call := groupCall(g, clk)
	require.True(t, call("gone-1", sluice.Failure))
	require.True(t, call("gone-2", sluice.Failure))
	clk.Advance(1500 * time.Millisecond) // open periods over, but not for a second more
	require.True(t, call("flaky", sluice.Failure), "the overflow breaker")
	assert.False(t, call("healthy", sluice.Success), "still full: the overflow breaker is open")
	clk.Advance(time.Hour)
	require.True(t, call("flaky", sluice.Failure), "a slot freed up")
	assert.True(t, call("healthy", sluice.Success), "and another")
	_, own := g.Get("healthy")
	assert.True(t, own)
}

// A half-open breaker with no probe in flight, whose key is not called
// again, has gone idle: its probe's caller went away (Ignored), or its
// probe succeeded with a second needed to close it. It frees its slot as
// an idle open one does, and its listeners hear it close as it goes.
func TestAGroupDropsHalfOpenBreakersGoneIdle(t *testing.T) {
	for name, tc := range map[string]struct {
		probes  breaker.Option
		outcome sluice.Outcome
	}{
		"caller gone":      {breaker.WithHalfOpenProbes(1, 1), sluice.Ignored},
		"one probe of two": {breaker.WithHalfOpenProbes(2, 1), sluice.Success},
	} {
		t.Run(name, func(t *testing.T) {
			clk := sluice.NewManualClock(0)
			g, err := breaker.NewGroup("g", breaker.WithMaxBreakers(1), breaker.WithConsecutiveFailures(1),
				breaker.WithOpenDuration(time.Second), tc.probes, breaker.WithClock(clk))
			require.NoError(t, err)
			var heard []string
			g.Subscribe(func(c sluice.StateChange) { heard = append(heard, c.Policy+" "+c.To) })
			call := groupCall(g, clk)
			require.True(t, call("gone", sluice.Failure))
			clk.Advance(2 * time.Second)
			require.True(t, call("gone", tc.outcome), "the probe")
			b, ok := g.Get("gone")
			require.True(t, ok)
			require.Equal(t, breaker.StateHalfOpen, b.State())
			clk.Advance(500 * time.Millisecond)
			require.True(t, call("new", sluice.Success), "the overflow breaker, while the probe could still come")
			_, own := g.Get("new")
			assert.False(t, own)
			clk.Advance(time.Hour)
			require.True(t, call("new", sluice.Success))
			_, own = g.Get("new")
			assert.True(t, own, "the idle half-open breaker's slot")
			assert.Equal(t, []string{"breaker/g/gone open", "breaker/g/gone half-open", "breaker/g/gone closed"}, heard)
		})
	}
}

// groupCall returns a function that makes one call of key through g at
// clk's instant, ending with o, and reports whether g admitted it.
func groupCall(g *breaker.Group, clk *sluice.ManualClock) func(key string, o sluice.Outcome) bool {
	return func(key string, o sluice.Outcome) bool {
		now := clk.Now()
		v := policytest.AnswerOf(g.Admit(res(key), now))
		if v.Cause != nil {
			return false
		}
		g.Done(v.Ticket, o, now, 0)
		return true
	}
}

// A listener that panics keeps neither the other listeners nor the changes
// queued behind it from being heard; its panic comes out once they are.
func TestAListenerPanicStrandsNoChange(t *testing.T) {
	b := mustNew(t)
	log := hear(b)
	first := true
	b.Subscribe(func(c sluice.StateChange) {
		if first {
			first = false
			b.ForceClose() // queued behind this change
			panic("listener failed")
		}
	})
	assert.PanicsWithValue(t, "listener failed", b.ForceOpen)
	require.Equal(t, breaker.StateClosed, b.State())
	seen := log.all()
	require.Len(t, seen, 2)
	assert.Equal(t, "open", seen[0].To)
	assert.Equal(t, "closed", seen[1].To)
}
