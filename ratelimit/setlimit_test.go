package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policytest"
	"github.com/sluice-go/sluice/internal/policywindow"
	"github.com/sluice-go/sluice/ratelimit"
)

// allowedOf counts how many of n unit requests at the clock's instant p
// admits.
func allowedOf(p sluice.Policy, clk *sluice.ManualClock, n int) int {
	ok := 0
	for range n {
		if v := policytest.AnswerOf(p.Admit(context.Background(), clk.Now())); v.Cause == nil {
			ok++
		}
	}
	return ok
}

// admitsAt reports whether p admits a request of cost n at now, which then
// succeeds.
func admitsAt(p sluice.Policy, now time.Duration, n int64) bool {
	v := policytest.AnswerOf(p.Admit(sluice.WithCost(context.Background(), n), now))
	if v.Cause != nil {
		return false
	}
	p.Done(v.Ticket, sluice.Success, now, 0)
	return true
}

// TestSetLimitKeepsStateAndRefusesBadNumbers walks each limiter through a
// change that keeps what it has counted, and one with bad numbers, which
// is an error and changes nothing.
func TestSetLimitKeepsStateAndRefusesBadNumbers(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name string
		make func(clk sluice.Clock) (sluice.Policy, error)
		// before: admitted of 10 at the start; raise: the change;
		// after: admitted of 10 right after it.
		before int
		raise  func(p sluice.Policy) error
		after  int
		bad    func(p sluice.Policy) error
	}{
		{"token-bucket", func(clk sluice.Clock) (sluice.Policy, error) {
			return ratelimit.NewTokenBucket(ratelimit.Every(100*ms), 3, ratelimit.WithClock(clk))
		}, 3, func(p sluice.Policy) error {
			return p.(*ratelimit.TokenBucket).SetLimit(ratelimit.Every(100*ms), 5)
		}, 2, func(p sluice.Policy) error {
			return p.(*ratelimit.TokenBucket).SetLimit(ratelimit.Every(100*ms), 0)
		}},
		{"gcra", func(clk sluice.Clock) (sluice.Policy, error) {
			return ratelimit.NewGCRA(ratelimit.Every(100*ms), 3)
		}, 3, func(p sluice.Policy) error {
			return p.(*ratelimit.GCRA).SetLimit(ratelimit.Every(100*ms), 5)
		}, 2, func(p sluice.Policy) error {
			return p.(*ratelimit.GCRA).SetLimit(ratelimit.Rate{}, 5)
		}},
		{"leaky-bucket", func(clk sluice.Clock) (sluice.Policy, error) {
			return ratelimit.NewLeakyBucket(ratelimit.Every(100*ms), 3)
		}, 3, func(p sluice.Policy) error {
			return p.(*ratelimit.LeakyBucket).SetLimit(ratelimit.Every(100*ms), 5)
		}, 2, func(p sluice.Policy) error {
			return p.(*ratelimit.LeakyBucket).SetLimit(ratelimit.Every(100*ms), -1)
		}},
		{"fixed-window", func(clk sluice.Clock) (sluice.Policy, error) {
			return ratelimit.NewFixedWindow(3, time.Second)
		}, 3, func(p sluice.Policy) error {
			return p.(*ratelimit.FixedWindow).SetLimit(5, time.Second)
		}, 2, func(p sluice.Policy) error {
			return p.(*ratelimit.FixedWindow).SetLimit(5, 0)
		}},
		{"sliding-window", func(clk sluice.Clock) (sluice.Policy, error) {
			return ratelimit.NewSlidingWindow(3, time.Second, 4)
		}, 3, func(p sluice.Policy) error {
			return p.(*ratelimit.SlidingWindow).SetLimit(5, 2*time.Second, 8)
		}, 2, func(p sluice.Policy) error {
			return p.(*ratelimit.SlidingWindow).SetLimit(5, time.Second, 3)
		}},
		{"sliding-log", func(clk sluice.Clock) (sluice.Policy, error) {
			return ratelimit.NewSlidingLog(3, time.Second)
		}, 3, func(p sluice.Policy) error {
			return p.(*ratelimit.SlidingLog).SetLimit(5, time.Second)
		}, 2, func(p sluice.Policy) error {
			return p.(*ratelimit.SlidingLog).SetLimit(1<<21, time.Second)
		}},
		{"warm-up", func(clk sluice.Clock) (sluice.Policy, error) {
			return ratelimit.NewWarmUp(ratelimit.Every(100*ms), 3, 10*ms, 2)
		}, 2, func(p sluice.Policy) error {
			return p.(*ratelimit.WarmUp).SetLimit(ratelimit.Every(100*ms), 5, 10*ms, 2)
		}, 2, func(p sluice.Policy) error {
			return p.(*ratelimit.WarmUp).SetLimit(ratelimit.Every(100*ms), 5, 10*ms, 1)
		}},
		{"shaper", func(clk sluice.Clock) (sluice.Policy, error) {
			return ratelimit.NewShaper(ratelimit.Every(100*ms), 0)
		}, 1, func(p sluice.Policy) error {
			return p.(*ratelimit.Shaper).SetLimit(ratelimit.Every(50*ms), 0)
		}, 0, func(p sluice.Policy) error {
			return p.(*ratelimit.Shaper).SetLimit(ratelimit.Every(50*ms), time.Second) // would start waiting
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := sluice.NewManualClock(time.Hour)
			p, err := c.make(clk)
			require.NoError(t, err)
			window := func() time.Duration { return policywindow.Of(p) }
			w := window()
			require.Error(t, c.bad(p))
			assert.Equal(t, w, window(), "a refused change changes nothing")
			assert.Equal(t, c.before, allowedOf(p, clk, 10))
			require.NoError(t, c.raise(p))
			assert.Equal(t, c.after, allowedOf(p, clk, 10), "what was taken stays taken")
		})
	}
}

func TestTokenBucketSetLimitKeepsWhatItLacks(t *testing.T) {
	clk := sluice.NewManualClock(0)
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10, ratelimit.WithClock(clk))
	require.NoError(t, err)
	require.True(t, tb.AllowN(4)) // 6 left, 4 missing
	require.NoError(t, tb.SetLimit(ratelimit.PerSecond(100), 20))
	assert.InDelta(t, 16, tb.Tokens(), 1e-9, "4 missing of 20")
	assert.Equal(t, ratelimit.PerSecond(100), tb.Rate())
	assert.Equal(t, int64(20), tb.Burst())
	clk.Advance(40 * time.Millisecond)
	assert.InDelta(t, 20, tb.Tokens(), 1e-9, "refilled at the new rate")
}

func TestFixedWindowLoweredThenRaisedGivesNothingTwice(t *testing.T) {
	clk := sluice.NewManualClock(0)
	w, err := ratelimit.NewFixedWindow(100, time.Second)
	require.NoError(t, err)
	assert.Equal(t, 80, allowedOf(w, clk, 80))
	require.NoError(t, w.SetLimit(3, time.Second))
	assert.Zero(t, allowedOf(w, clk, 5))
	require.NoError(t, w.SetLimit(100, time.Second))
	assert.Equal(t, 20, allowedOf(w, clk, 50), "80 stay counted")
	clk.Advance(time.Second)
	assert.Equal(t, 50, allowedOf(w, clk, 50), "a new window starts afresh")
}

func TestSlidingWindowReshapedKeepsCountsUntilTheyLeave(t *testing.T) {
	clk := sluice.NewManualClock(0)
	w, err := ratelimit.NewSlidingWindow(4, time.Second, 4)
	require.NoError(t, err)
	assert.Equal(t, 4, allowedOf(w, clk, 4)) // in the bucket [0, 250ms)
	clk.Advance(500 * time.Millisecond)
	require.NoError(t, w.SetLimit(4, 2*time.Second, 2))
	assert.Zero(t, allowedOf(w, clk, 1), "still counted")
	assert.Equal(t, 2*time.Second, policywindow.Of(w))
	clk.Advance(1500 * time.Millisecond) // the old bucket's end plus the new window has passed
	assert.Equal(t, 4, allowedOf(w, clk, 5))
}

// Reshaped, a sliding window's counts leave no sooner than they would
// have: 10 units counted at 4.5 s in a bucket of [4 s, 5 s) of a 10 s
// window leave at 14 s, whatever the new buckets (coarser ones put them in
// the bucket holding their old bucket's end, [0 s, 5 s), which let them
// leave at 10 s). A shorter window holds them for a whole new window at
// least, and no longer than they would have been.
func TestSlidingWindowReshapedCountsLeaveNoSooner(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		window  time.Duration
		buckets int
	}{
		{10 * s, 2}, {10 * s, 5}, {10 * s, 20}, {12 * s, 8}, {5 * s, 5}, {4 * s, 2}, {20 * s, 4}, {10 * s, 10},
	} {
		w, err := ratelimit.NewSlidingWindow(10, 10*s, 10)
		require.NoError(t, err)
		require.True(t, admitsAt(w, 4500*time.Millisecond, 10))
		require.NoError(t, w.SetLimit(10, tc.window, tc.buckets))
		free := time.Duration(-1)
		for now := 4500 * time.Millisecond; now <= 40*s; now += 100 * time.Millisecond {
			if admitsAt(w, now, 1) {
				free = now
				break
			}
		}
		least := 14 * s
		if tc.window < 10*s {
			least = 4500*time.Millisecond + tc.window
		}
		assert.GreaterOrEqual(t, free, least, "%v in %d buckets: counted units left at %v", tc.window, tc.buckets, free)
		assert.LessOrEqual(t, free, max(14*s, least)+tc.window/time.Duration(tc.buckets), "%v in %d buckets: held for %v", tc.window, tc.buckets, free)
	}
}

func TestKeyedSetLimitReachesHeldAndNewKeys(t *testing.T) {
	clk := sluice.NewManualClock(0)
	k, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewTokenBucket(ratelimit.Rate{Count: 1, Period: time.Hour}, 1, ratelimit.WithClock(clk))
	})
	require.NoError(t, err)
	at := func(key string) context.Context { return sluice.WithKey(context.Background(), key) }
	admit := func(key string) bool { _, _, err := k.Admit(at(key), clk.Now()); return err == nil }
	require.True(t, admit("held"))
	require.False(t, admit("held"))

	bad := func(p sluice.Policy) error {
		return p.(*ratelimit.TokenBucket).SetLimit(ratelimit.Rate{Count: 1, Period: time.Hour}, 0)
	}
	require.Error(t, k.SetLimit(bad), "tried on a probe first")
	require.Error(t, k.SetLimit(nil))
	require.False(t, admit("held"), "nothing changed")

	require.NoError(t, k.SetLimit(func(p sluice.Policy) error {
		return p.(*ratelimit.TokenBucket).SetLimit(ratelimit.Rate{Count: 1, Period: time.Hour}, 3)
	}))
	assert.Equal(t, 3*time.Hour, policywindow.Of(k))
	n := 0
	for admit("held") {
		n++
	}
	assert.Equal(t, 2, n, "the held key keeps its 1 taken, of 3")
	n = 0
	for admit("new") {
		n++
	}
	assert.Equal(t, 3, n, "a new key has the new burst")
}

// A limiter changed before it admitted anything gives back what a later
// release returns: Keyed changes every new key's limiter that way.
func TestKeyedNewKeyAfterSetLimitGivesBackReleases(t *testing.T) {
	clk := sluice.NewManualClock(time.Hour)
	for name, mk := range map[string]func() (sluice.Policy, error){
		"fixed-window": func() (sluice.Policy, error) { return ratelimit.NewFixedWindow(1, time.Hour) },
		"leaky-bucket": func() (sluice.Policy, error) {
			return ratelimit.NewLeakyBucket(ratelimit.Rate{Count: 1, Period: time.Hour}, 1)
		},
		"sliding-window": func() (sluice.Policy, error) {
			return ratelimit.NewSlidingWindow(1, time.Hour, 2)
		},
	} {
		t.Run(name, func(t *testing.T) {
			k, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) { return mk() }, ratelimit.WithClock(clk))
			require.NoError(t, err)
			require.NoError(t, k.SetLimit(func(p sluice.Policy) error {
				switch p := p.(type) {
				case *ratelimit.FixedWindow:
					return p.SetLimit(2, time.Hour)
				case *ratelimit.LeakyBucket:
					return p.SetLimit(ratelimit.Rate{Count: 2, Period: time.Hour}, 2)
				case *ratelimit.SlidingWindow:
					return p.SetLimit(2, time.Hour, 2)
				}
				return nil
			}))
			ctx := sluice.WithKey(context.Background(), "new")
			clk.Advance(time.Millisecond)
			v := policytest.AnswerOf(k.Admit(ctx, clk.Now()))
			require.NoError(t, v.Cause)
			k.Done(v.Ticket, sluice.Released, clk.Now(), 0)
			ok := 0
			for range 3 {
				if policytest.AnswerOf(k.Admit(ctx, clk.Now())).Cause == nil {
					ok++
				}
			}
			assert.Equal(t, 2, ok, "the release gave its quota back")
		})
	}
}

func TestGCRAReleaseAcrossSetLimitGivesNothingBack(t *testing.T) {
	g, err := ratelimit.NewGCRA(ratelimit.Every(time.Second), 2)
	require.NoError(t, err)
	ctx := context.Background()
	now := time.Hour
	a, b := policytest.AnswerOf(g.Admit(ctx, now)), policytest.AnswerOf(g.Admit(ctx, now))
	require.NoError(t, a.Cause)
	require.NoError(t, b.Cause)
	g.Done(a.Ticket, sluice.Released, now, 0)
	require.NoError(t, policytest.AnswerOf(g.Admit(ctx, now)).Cause, "a release before any change gives its quota back")
	require.NoError(t, g.SetLimit(ratelimit.Every(10*time.Second), 1)) // 2s of debt: full in 2s
	g.Done(b.Ticket, sluice.Released, now, 0)
	require.Error(t, policytest.AnswerOf(g.Admit(ctx, now)).Cause, "cut at 1s a token, it would give back 10s")
}

// At the same rate, a GCRA's SetLimit leaves releases whole: a request of
// cost 5, released after the burst was lowered to 2, gives back its 5.
func TestGCRAReleaseAcrossALowerBurstGivesBack(t *testing.T) {
	g, err := ratelimit.NewGCRA(ratelimit.PerSecond(1), 5)
	require.NoError(t, err)
	ctx := sluice.WithCost(context.Background(), 5)
	a := policytest.AnswerOf(g.Admit(ctx, time.Hour))
	require.NoError(t, a.Cause)
	require.NoError(t, g.SetLimit(ratelimit.PerSecond(1), 2))
	g.Done(a.Ticket, sluice.Released, time.Hour, 0)
	assert.True(t, admitsAt(g, time.Hour, 2), "the burst is whole again")
	assert.False(t, admitsAt(g, time.Hour, 1), "and no more than it")
}

// A SetLimit whose tickets read as before (the same rate or window, a
// limit of the same bit length) cuts no release: a request admitted after
// it, or before it, and released gives back what it took, as with no
// change. Counted: what a limiter admits afterwards at the same instant.
func TestReleaseAfterASetLimitThatReadsTicketsAlikeGivesBack(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name string
		mk   func() (sluice.Policy, func() error)
	}{
		{"fixed window", func() (sluice.Policy, func() error) {
			w, _ := ratelimit.NewFixedWindow(4, time.Second)
			return w, func() error { return w.SetLimit(5, time.Second) }
		}},
		{"sliding window", func() (sluice.Policy, func() error) {
			w, _ := ratelimit.NewSlidingWindow(2, time.Second, 4)
			return w, func() error { return w.SetLimit(3, time.Second, 4) }
		}},
		{"gcra", func() (sluice.Policy, func() error) {
			g, _ := ratelimit.NewGCRA(ratelimit.Every(100*ms), 2)
			return g, func() error { return g.SetLimit(ratelimit.Every(100*ms), 3) }
		}},
		{"leaky bucket", func() (sluice.Policy, func() error) {
			b, _ := ratelimit.NewLeakyBucket(ratelimit.Every(100*ms), 2)
			return b, func() error { return b.SetLimit(ratelimit.Every(100*ms), 3) }
		}},
		{"warm-up", func() (sluice.Policy, func() error) {
			w, _ := ratelimit.NewWarmUp(ratelimit.Every(100*ms), 10, time.Second, 3)
			return w, func() error { return w.SetLimit(ratelimit.Every(100*ms), 11, time.Second, 3) }
		}},
		{"token bucket", func() (sluice.Policy, func() error) {
			b, _ := ratelimit.NewTokenBucket(ratelimit.Every(100*ms), 2, ratelimit.WithClock(sluice.NewManualClock(0)))
			return b, func() error { return b.SetLimit(ratelimit.Every(100*ms), 3) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, now := context.Background(), 10*ms
			after := func(set, release bool) int {
				p, setLimit := tc.mk()
				before := policytest.AnswerOf(p.Admit(ctx, now))
				require.NoError(t, before.Cause)
				if set {
					require.NoError(t, setLimit())
				}
				a := policytest.AnswerOf(p.Admit(ctx, now))
				require.NoError(t, a.Cause)
				if release {
					p.Done(a.Ticket, sluice.Released, now, 0)
					p.Done(before.Ticket, sluice.Released, now, 0)
				}
				n := 0
				for range 100 {
					if policytest.AnswerOf(p.Admit(ctx, now)).Cause != nil {
						break
					}
					n++
				}
				return n
			}
			require.Equal(t, after(false, false)+2, after(false, true), "with no change, the two releases give back")
			assert.Equal(t, after(true, false)+2, after(true, true), "after the change, both releases give back what they took")
		})
	}
}

// The same for a shaper: a turn taken after a SetLimit at the same rate
// (and a maximum wait of the same bit length) and released is free again
// for the next request.
func TestShaperReleaseAfterASetLimitAtTheSameRateGivesBack(t *testing.T) {
	const ms = time.Millisecond
	ctx := context.Background()
	s, err := ratelimit.NewShaper(ratelimit.Every(100*ms), time.Second)
	require.NoError(t, err)
	require.NoError(t, policytest.AnswerOf(s.Admit(ctx, 0)).Cause) // the turn [0, 100ms)
	require.NoError(t, s.SetLimit(ratelimit.Every(100*ms), 1050*ms))
	a := policytest.AnswerOf(s.Admit(ctx, 100*ms)) // the turn [100ms, 200ms), no wait
	require.NoError(t, a.Cause)
	s.Done(a.Ticket, sluice.Released, 100*ms, 0)
	short, cancel := context.WithTimeout(ctx, 50*ms)
	defer cancel()
	assert.NoError(t, policytest.AnswerOf(s.Admit(short, 100*ms)).Cause, "the released turn is free again: no wait")
}

// A window shortened by SetLimit counts what it admits after the change in
// the new window: a unit counted at t leaves by t + window. One unit of
// the old hour must not move the head an hour ahead, where every unit
// admitted since would count: 10 in the hour, not 10 a minute.
func TestSlidingWindowShortenedCountsNewUnitsInTheNewWindow(t *testing.T) {
	const s = time.Second
	w, err := ratelimit.NewSlidingWindow(10, time.Hour, 60)
	require.NoError(t, err)
	require.True(t, admitsAt(w, 30*s, 1), "one unit in the old hour-long window")
	require.NoError(t, w.SetLimit(10, time.Minute, 1))
	admitted := 0
	for m := time.Duration(1); m <= 10; m++ {
		for range 10 {
			if admitsAt(w, m*time.Minute, 1) {
				admitted++
			}
		}
	}
	// The old unit may be held until it would have left (up to 1 h); the
	// ones admitted since leave a minute after they came: 9 the first
	// minute, then 10 each.
	assert.GreaterOrEqual(t, admitted, 90, "ten minutes of a 10-a-minute limit after the change")
}
