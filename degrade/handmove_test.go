package degrade_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
)

// Set(false) on a switch that is already off, or Unpin on one that is not
// pinned, moves nothing, and the Auto's hold goes on: a loop that asserts
// the switch's state more often than OnFor does not keep the Auto from ever
// turning it on.
func TestHandMovesThatChangeNothingLeaveTheHold(t *testing.T) {
	clock := sluice.NewManualClock(0)
	sw := newSwitch(t, "extras", degrade.WithClock(clock))
	a, err := degrade.NewAuto(sw, func() float64 { return 1 }, degrade.Hysteresis{
		OnAbove: 0.5, OnFor: 10 * time.Second, OffBelow: 0.5, OffFor: 10 * time.Second,
	})
	require.NoError(t, err)
	for i := range 10 {
		a.Observe(time.Duration(i)*time.Second, 1)
		require.False(t, sw.Set(false), "the switch is already off: no flip")
		sw.Unpin() // not pinned: nothing to unpin
	}
	require.True(t, a.Observe(10*time.Second, 1), "high for OnFor: the Auto flips it on")
	require.True(t, sw.On())
}

// A state named "" is no state a source reports: the signal could never
// read 1. StateSignal refuses it.
func TestStateSignalRefusesAnEmptyStateName(t *testing.T) {
	sw := newSwitch(t, "src")
	_, unsub, err := degrade.StateSignal(sw, "shedding", "")
	if unsub != nil {
		defer unsub()
	}
	require.Error(t, err)
}
