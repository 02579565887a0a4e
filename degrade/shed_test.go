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
	g := newGuard(t, sluice.With(p), sluice.OnStateChange(seen.record), sluice.WithFallback(fb))
	full := func(context.Context) (string, error) { return "full page", nil }

	v, err := sluice.Execute(context.Background(), g, full)
	require.NoError(t, err)
	assert.Equal(t, "full page", v)

	sw.Set(true)
	d, _, err := g.Admit(context.Background())
	assert.ErrorIs(t, err, sluice.ErrOverloaded)
	assert.Equal(t, sluice.Decision{Policy: "degrade/extras", Limit: -1, RetryAfter: 5 * time.Second, Cause: sluice.ErrOverloaded}, d)
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

// TestShedAdmitFastAgrees: AdmitFast answers as Admit does, with the switch
// off and on.
func TestShedAdmitFastAgrees(t *testing.T) {
	sw := newSwitch(t, "extras")
	p, err := degrade.NewShed(sw, 5*time.Second)
	require.NoError(t, err)
	ctx := context.Background()
	for _, on := range []bool{false, true, false} {
		sw.Set(on)
		d, tk := p.Admit(ctx, 0)
		ft, q, rej := p.AdmitFast(ctx, 0)
		got := q.Decision(p.Name())
		if rej != nil {
			got = rej.Decision
		}
		assert.Equal(t, d, got, "switch on: %v", on)
		assert.Equal(t, !on, rej == nil)
		assert.Equal(t, tk, ft)
	}
	sw.Set(false)
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		if _, _, rej := p.AdmitFast(ctx, 0); rej != nil {
			t.Fatal(rej)
		}
	}))
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
