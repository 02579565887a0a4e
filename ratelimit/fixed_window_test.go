package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

const ms = time.Millisecond

func mustFixedWindow(t testing.TB, limit int64, window time.Duration, opts ...Option) *FixedWindow {
	t.Helper()
	w, err := NewFixedWindow(limit, window, opts...)
	require.NoError(t, err)
	return w
}

func TestFixedWindowSteps(t *testing.T) {
	w := mustFixedWindow(t, 3, 100*ms)
	runSteps(t, w, []step{
		{at: 10 * ms, allowed: true, remaining: 2, reset: 90 * ms, retryAfter: 0},
		{at: 20 * ms, n: 2, allowed: true, remaining: 0, reset: 80 * ms, retryAfter: 0},
		{at: 30 * ms, allowed: false, remaining: 0, reset: 70 * ms, retryAfter: 70 * ms},
		{at: 99 * ms, allowed: false, remaining: 0, reset: ms, retryAfter: ms},
		// A new window: the whole limit again.
		{at: 100 * ms, n: 3, allowed: true, remaining: 0, reset: 100 * ms, retryAfter: 0},
		// The clock steps back into the previous window: counted against the
		// current one, nothing extra.
		{at: 50 * ms, allowed: false, remaining: 0, reset: 150 * ms, retryAfter: 150 * ms},
		// Released gives the unit back in the same window.
		{at: 250 * ms, allowed: true, remaining: 2, reset: 50 * ms, release: true},
		{at: 251 * ms, allowed: true, remaining: 2, reset: 49 * ms},
		{at: 252 * ms, n: 2, allowed: true, remaining: 0, reset: 48 * ms},
		// Never satisfiable: more than the limit.
		{at: 260 * ms, n: 4, allowed: false, remaining: 0, reset: 40 * ms, retryAfter: 0},
		// Negative instants are ordinary instants.
	})
	d := decideAt(w, 260*ms, 4)
	require.ErrorIs(t, d.Cause, ErrNeverSatisfiable)
	require.ErrorIs(t, d.Cause, sluice.ErrRateLimited)
	assert.Equal(t, int64(3), d.Limit)
}

func TestFixedWindowNegativeInstants(t *testing.T) {
	w := mustFixedWindow(t, 2, time.Second)
	runSteps(t, w, []step{
		{at: -1500 * ms, allowed: true, remaining: 1, reset: 500 * ms},
		{at: -1100 * ms, allowed: true, remaining: 0, reset: 100 * ms},
		{at: -1001 * ms, allowed: false, remaining: 0, reset: ms, retryAfter: ms},
		{at: -1000 * ms, allowed: true, remaining: 1, reset: time.Second},
		{at: 0, allowed: true, remaining: 1, reset: time.Second},
	})
}

func TestFixedWindowReleaseAfterWindowMovedGivesNothing(t *testing.T) {
	w := mustFixedWindow(t, 2, 100*ms)
	d, tk := admit(w, context.Background(), 10*ms)
	require.True(t, d.Allowed)
	require.True(t, w.allowNAt(110*ms, 1))
	w.Done(tk, sluice.Released, 110*ms, 100*ms)
	assert.Equal(t, int64(0), decideAt(w, 120*ms, 1).Remaining, "the release of a past window's unit must not refund the current one")
}

func TestFixedWindowValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  int64
		window time.Duration
		opts   []Option
	}{
		{"zero limit", 0, time.Second, nil},
		{"negative limit", -1, time.Second, nil},
		{"zero window", 10, 0, nil},
		{"negative window", 10, -time.Second, nil},
		{"window too short for the limit", 1_000_000, time.Millisecond, nil},
		{"limit too large", 1 << 45, time.Hour, nil},
		{"empty name", 10, time.Second, []Option{WithName("")}},
		{"nil clock", 10, time.Second, []Option{WithClock(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := NewFixedWindow(tc.limit, tc.window, tc.opts...)
			require.Error(t, err)
			require.Nil(t, w)
		})
	}
}

func TestFixedWindowClockAndName(t *testing.T) {
	clk := sluice.NewManualClock(0)
	w := mustFixedWindow(t, 2, time.Second, WithName("ratelimit/login"))
	assert.Equal(t, "ratelimit/login", w.Name())
	assert.True(t, w.allowNAt(clk.Now(), 1))
	assert.True(t, w.allowNAt(clk.Now(), 1))
	assert.False(t, w.allowNAt(clk.Now(), 1))
	clk.Advance(time.Second)
	assert.True(t, w.allowNAt(clk.Now(), 2))
	assert.False(t, w.allowNAt(clk.Now(), 3))
}

func TestFixedWindowConformance(t *testing.T) {
	rateConformance(t, func(t *testing.T) sluice.Policy { return mustFixedWindow(t, 10, 50*ms) })
}

func TestFixedWindowAllocatesNothing(t *testing.T) {
	assertAllocFree(t, mustFixedWindow(t, 1000, time.Second), ms)
}

func TestFixedWindowConcurrentNeverOver(t *testing.T) {
	w := mustFixedWindow(t, 50, 10*ms)
	start, end, admitted := hammer(t, w, 20*time.Microsecond)
	windows := floorDiv(int64(end), int64(10*ms)) - floorDiv(int64(start), int64(10*ms)) + 1
	bound := 50 * windows
	t.Logf("admitted %d over %d windows, bound %d", admitted, windows, bound)
	assert.LessOrEqual(t, admitted, bound)
	assert.Positive(t, admitted)
}

func TestFixedWindowNeverErrorIsRateLimited(t *testing.T) {
	w := mustFixedWindow(t, 1, time.Second)
	d := decideAt(w, 0, 2)
	assert.True(t, errors.Is(d.Cause, sluice.ErrRateLimited))
	assert.Equal(t, time.Duration(0), d.RetryAfter)
}

// The largest limits the windows count are what their errors say.
func TestWindowLimitCaps(t *testing.T) {
	_, err := NewFixedWindow(1<<40-2, 2*time.Hour)
	assert.NoError(t, err)
	_, err = NewFixedWindow(1<<40-1, 2*time.Hour)
	assert.ErrorContains(t, err, fmt.Sprint(int64(1<<40-2)))
	_, err = NewSlidingWindow(1<<40-1, 2*time.Hour, 1)
	assert.NoError(t, err)
	_, err = NewSlidingWindow(1<<40, 2*time.Hour, 1)
	assert.ErrorContains(t, err, fmt.Sprint(int64(1<<40-1)))
}
