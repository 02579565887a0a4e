package ratelimit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluice-go/sluice"
)

// Only the token bucket and Keyed read a clock of their own: the other
// constructors refuse WithClock rather than ignore it.
func TestWithClockOnlyWhereAClockIsRead(t *testing.T) {
	clk := WithClock(sluice.NewManualClock(0))
	for name, build := range map[string]func() error{
		"fixed-window":   func() error { _, err := NewFixedWindow(1, time.Second, clk); return err },
		"sliding-window": func() error { _, err := NewSlidingWindow(1, time.Second, 10, clk); return err },
		"sliding-log":    func() error { _, err := NewSlidingLog(1, time.Second, clk); return err },
		"leaky-bucket":   func() error { _, err := NewLeakyBucket(PerSecond(1), 1, clk); return err },
		"gcra":           func() error { _, err := NewGCRA(PerSecond(1), 1, clk); return err },
		"warm-up":        func() error { _, err := NewWarmUp(PerSecond(1), 1, time.Second, 3, clk); return err },
		"shaper":         func() error { _, err := NewShaper(PerSecond(1), 0, clk); return err },
	} {
		assert.ErrorContains(t, build(), "sluice.WithClock", name)
	}
	_, err := NewTokenBucket(PerSecond(1), 1, clk)
	assert.NoError(t, err)
	_, err = NewKeyed(func(string) (sluice.Policy, error) { return NewGCRA(PerSecond(1), 1) }, clk)
	assert.NoError(t, err)
}
