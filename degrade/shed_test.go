package degrade_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/internal/policytest"
)

func TestShedConformance(t *testing.T) {
	policytest.Run(t, policytest.Config{
		New: func(t *testing.T) sluice.Policy {
			p, err := degrade.NewShed(newSwitch(t, "extras"), time.Second)
			require.NoError(t, err)
			return p
		},
		Causes: []error{sluice.ErrOverloaded},
	})
}

func TestShedTurnsTheRouteAwayWhileTheSwitchIsOn(t *testing.T) {
	sw := newSwitch(t, "extras")
	p, err := degrade.NewShed(sw, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "degrade/extras", p.Name())
	var seen changes
	fb, err := degrade.New(degrade.OnOverloaded(degrade.Value("basic page")))
	require.NoError(t, err)
	defer p.Subscribe(seen.record)()
	g := newGuard(t, sluice.With(p), sluice.WithFallback(fb))
	full := func(context.Context) (string, error) { return "full page", nil }

	v, err := sluice.Execute(context.Background(), g, full)
	require.NoError(t, err)
	assert.Equal(t, "full page", v)

	sw.Set(true)
	var call sluice.Call
	err = g.Begin(context.Background(), &call)
	assert.ErrorIs(t, err, sluice.ErrOverloaded)
	assert.Equal(t, sluice.Decision{Policy: "degrade/extras", Limit: -1, RetryAfter: 5 * time.Second, Cause: sluice.ErrOverloaded}, call.Decision())
	assert.NoError(t, call.End(err), "End of the rejection applies the fallback")
	v, err = sluice.Execute(context.Background(), g, full)
	require.NoError(t, err)
	assert.Equal(t, "basic page", v)

	require.Len(t, seen.all(), 1)
	assert.Equal(t, "on", seen.all()[0].To)

	_, err = degrade.NewShed(nil, time.Second)
	assert.ErrorContains(t, err, "nil switch")
	_, err = degrade.NewShed(sw, 0)
	assert.ErrorContains(t, err, "not positive")
}

// A Shed's state changes name the Shed policy, as every StateChange names the
// policy whose state changed.
func TestShedStateChangesNameTheShed(t *testing.T) {
	sw := newSwitch(t, "extras")
	p, err := degrade.NewShed(sw, time.Second)
	require.NoError(t, err)
	var got []sluice.StateChange
	unsubscribe := p.Subscribe(func(c sluice.StateChange) { got = append(got, c) })
	defer unsubscribe()
	sw.Set(true)
	require.Len(t, got, 1)
	assert.Equal(t, p.Name(), got[0].Policy)
	assert.Equal(t, "on", got[0].To)
}

// TestShedAdmit: Admit answers by the switch, off and on, needs nothing of
// a Guard, and allocates nothing, admitting or rejecting in a Guard.
func TestShedAdmit(t *testing.T) {
	sw := newSwitch(t, "extras")
	p, err := degrade.NewShed(sw, 5*time.Second)
	require.NoError(t, err)
	assert.Zero(t, p.Needs())
	ctx := context.Background()
	for _, on := range []bool{false, true, false} {
		sw.Set(on)
		v := policytest.AnswerOf(p.Admit(ctx, 0))
		if on {
			assert.Equal(t, policytest.Answer{Quota: sluice.Quota{Limit: -1, RetryAfter: 5 * time.Second}, Cause: sluice.ErrOverloaded}, v)
		} else {
			assert.Equal(t, policytest.Answer{Quota: sluice.Quota{Limit: -1}}, v)
		}
	}
	sw.Set(false)
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		if v := policytest.AnswerOf(p.Admit(ctx, 0)); v.Cause != nil {
			t.Fatal(v.Cause)
		}
	}))
	g := newGuard(t, sluice.With(p))
	fn := func(context.Context) error { return nil }
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = g.Do(ctx, fn) }))
	sw.Set(true)
	assert.ErrorIs(t, g.Do(ctx, fn), sluice.ErrOverloaded)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = g.Do(ctx, fn) }), "a shed's rejections share one error")
}

// Subscribe(nil) is ignored, as Switch.Subscribe ignores it: later flips do
// not call it.
func TestShedSubscribeNilIgnored(t *testing.T) {
	sw := newSwitch(t, "recs")
	shed, err := degrade.NewShed(sw, time.Second)
	require.NoError(t, err)
	unsubscribe := shed.Subscribe(nil)
	assert.NotPanics(t, func() { sw.Set(true) })
	unsubscribe()
}
