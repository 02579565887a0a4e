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
