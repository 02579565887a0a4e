package degrade_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/policytest"
)

// Timeouts are failures a real breaker counts: after two, it opens, and the
// next request is answered by the circuit-open fallback without running.
// A switch following the breaker turns on with it.
func TestTimeoutsTripABreakerAndFallbacksAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := monoclock.New()
		br, err := breaker.New("payments", breaker.WithConsecutiveFailures(2),
			breaker.WithOpenDuration(time.Minute), breaker.WithClock(clock))
		require.NoError(t, err)

		sig, unsub, err := degrade.StateSignal(br, breaker.StateOpen.String(), breaker.StateHalfOpen.String())
		require.NoError(t, err)
		defer unsub()
		sw := newSwitch(t, "payments-degraded", degrade.WithClock(clock))
		auto, err := degrade.NewAuto(sw, sig, degrade.Hysteresis{OnAbove: 0.5, OffBelow: 0.5, OffFor: 30 * time.Second})
		require.NoError(t, err)

		fb, err := degrade.New(
			degrade.OnTimeout(degrade.Value("slow: cached total")),
			degrade.OnCircuitOpen(degrade.Value("open: cached total")),
		)
		require.NoError(t, err)
		var evs events
		g := newGuard(t, sluice.WithClock(clock), sluice.With(br), sluice.WithTimeout(100*time.Millisecond),
			sluice.WithFallback(fb), sluice.OnFallback(evs.record))

		ran := 0
		slow := func(ctx context.Context) (string, error) {
			ran++
			<-ctx.Done()
			return "", ctx.Err()
		}
		for range 2 {
			v, err := sluice.Execute(context.Background(), g, slow)
			require.NoError(t, err)
			assert.Equal(t, "slow: cached total", v)
		}
		assert.Equal(t, breaker.StateOpen, br.State())
		assert.True(t, auto.Check())

		v, err := sluice.Execute(context.Background(), g, slow)
		require.NoError(t, err)
		assert.Equal(t, "open: cached total", v)
		assert.Equal(t, 2, ran, "the open breaker keeps the call from running")

		var names []string
		for _, ev := range evs.all() {
			names = append(names, ev.Fallback)
		}
		assert.Equal(t, []string{"timeout", "timeout", "circuit-open"}, names)
		assert.Equal(t, br.Name(), evs.all()[2].Policy)
	})
}

// Following a breaker.Group, the signal reads 1 while any member is open,
// not only while the last member to change is: one dependency closing again
// leaves the signal up for the other that is still open.
func TestStateSignalFollowsEveryMemberOfAGroup(t *testing.T) {
	g, err := breaker.NewGroup("deps", breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(time.Minute))
	require.NoError(t, err)
	sig, unsub, err := degrade.StateSignal(g, breaker.StateOpen.String())
	require.NoError(t, err)
	defer unsub()
	member := func(key string) *breaker.Breaker {
		v := policytest.AnswerOf(g.Admit(sluice.WithResource(context.Background(), key), 0))
		require.NoError(t, v.Cause)
		g.Done(v.Ticket, sluice.Success, 0, 0)
		b, ok := g.Get(key)
		require.True(t, ok)
		return b
	}
	a, b := member("a"), member("b")
	assert.Zero(t, sig())
	a.ForceOpen()
	b.ForceOpen()
	assert.Equal(t, 1.0, sig())
	b.ForceClose()
	assert.Equal(t, 1.0, sig(), "a is still open")
	a.ForceClose()
	assert.Zero(t, sig())
}
