package degrade_test

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
)

// fixedClock reads a fixed instant; a Clock's origin is arbitrary, so
// instants before it are negative.
type fixedClock struct{ at time.Duration }

func (c *fixedClock) Now() time.Duration { return c.at }

// A flip's instant is never told before the last one told, but a first
// flip is told as the clock read it: on a clock whose instants are negative
// (its origin is arbitrary), not at 0.
func TestSwitchTellsNegativeInstantsAsRead(t *testing.T) {
	clk := &fixedClock{at: -10 * time.Second}
	sw, err := degrade.NewSwitch("recs", degrade.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	var got []time.Duration
	sw.Subscribe(func(c sluice.StateChange) { got = append(got, c.At) })
	sw.Set(true)
	clk.at = -5 * time.Second
	sw.Set(false)
	want := []time.Duration{-10 * time.Second, -5 * time.Second}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("flips told at %v, want %v (the clock's readings)", got, want)
	}
}
