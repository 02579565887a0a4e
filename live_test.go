package sluice_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/ratelimit"
)

// policyKind makes one policy of a kind, reading clk; each call makes a
// new one, in the same state.
type policyKind struct {
	name string
	make func(t *testing.T, clk sluice.Clock) sluice.Policy
}

// seeded returns a random source that draws the same numbers for every
// policy made with the same seed.
func seeded(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		require.NoError(t, err)
		return v
	}
}

// policyKinds lists one policy of every kind, with numbers tight enough
// for the traffic of the tests below to be rejected now and then.
func policyKinds() []policyKind {
	rate := ratelimit.Every(40 * time.Millisecond)
	return []policyKind{
		{"token-bucket", func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return must[*ratelimit.TokenBucket](t)(ratelimit.NewTokenBucket(rate, 3, ratelimit.WithClock(clk)))
		}},
		{"gcra", func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return must[*ratelimit.GCRA](t)(ratelimit.NewGCRA(rate, 3))
		}},
		{"leaky-bucket", func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return must[*ratelimit.LeakyBucket](t)(ratelimit.NewLeakyBucket(rate, 3))
		}},
		{"fixed-window", func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return must[*ratelimit.FixedWindow](t)(ratelimit.NewFixedWindow(5, 200*time.Millisecond))
		}},
		{"sliding-window", func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return must[*ratelimit.SlidingWindow](t)(ratelimit.NewSlidingWindow(5, 200*time.Millisecond, 4))
		}},
		{"sliding-log", func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return must[*ratelimit.SlidingLog](t)(ratelimit.NewSlidingLog(5, 200*time.Millisecond))
		}},
		{"warm-up", func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return must[*ratelimit.WarmUp](t)(ratelimit.NewWarmUp(rate, 3, time.Second, 3))
		}},
		{"shaper", func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return must[*ratelimit.Shaper](t)(ratelimit.NewShaper(rate, 0))
		}},
		{"keyed", func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return must[*ratelimit.Keyed](t)(ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
				return ratelimit.NewTokenBucket(rate, 2, ratelimit.WithClock(clk))
			}, ratelimit.WithClock(clk)))
		}},
		{"breaker", func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return must[*breaker.Breaker](t)(breaker.New("b", breaker.WithConsecutiveFailures(2),
				breaker.WithOpenDuration(100*time.Millisecond), breaker.WithClock(clk)))
		}},
		{"breaker-group", func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return must[*breaker.Group](t)(breaker.NewGroup("g", breaker.WithErrorRatio(0.5, 4), breaker.WithCountWindow(8),
				breaker.WithOpenDuration(100*time.Millisecond), breaker.WithClock(clk)))
		}},
		{"adaptive-throttle", func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return must[*breaker.Adaptive](t)(breaker.NewAdaptive("a", breaker.WithMultiplier(1.1),
				breaker.WithMinThrottleRequests(4), breaker.WithRandom(seeded(7)), breaker.WithClock(clk)))
		}},
		{"bulkhead", func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return must[*adaptive.Shedder](t)(adaptive.NewBulkhead(2))
		}},
	}
}

// step is one step of recorded traffic: the clock moves by advance, a
// call begins, and the calls held open that are due end, failing when
// fail says so.
type step struct {
	advance time.Duration
	fail    bool // the call fails when it ends
	hold    int  // the call ends after this many more steps
}

func recordTraffic(n int, seed uint64) []step {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]step, n)
	for i := range out {
		out[i] = step{advance: time.Duration(r.IntN(40)) * time.Millisecond, fail: r.IntN(10) < 3, hold: r.IntN(3)}
	}
	return out
}

// shadowEvents counts the shadow rejections an observer hears.
type shadowEvents struct {
	mu     sync.Mutex
	shadow int
}

func (s *shadowEvents) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return func(_ context.Context, e sluice.CallEvent) {
		if e.Shadow {
			s.mu.Lock()
			s.shadow++
			s.mu.Unlock()
		}
	}, nil, nil
}

// play runs traffic through g on clk and returns the rejections.
func play(t *testing.T, g *sluice.Guard, clk *sluice.ManualClock, traffic []step) int {
	t.Helper()
	type open struct {
		c    sluice.Call
		due  int
		fail bool
	}
	var held []*open
	rejected := 0
	boom := errors.New("boom")
	for i, s := range traffic {
		clk.Advance(s.advance)
		ctx := sluice.WithKey(t.Context(), []string{"a", "b"}[i%2])
		ctx = sluice.WithResource(ctx, []string{"x", "y"}[i%2])
		var c sluice.Call
		err := g.Begin(ctx, &c)
		if err != nil {
			require.ErrorIs(t, err, sluice.ErrRejected)
			rejected++
		} else {
			held = append(held, &open{c: c, due: i + s.hold, fail: s.fail})
		}
		kept := held[:0]
		for _, o := range held {
			if o.due > i {
				kept = append(kept, o)
				continue
			}
			var err error
			if o.fail {
				err = boom
			}
			_ = o.c.End(err)
		}
		held = kept
	}
	for _, o := range held {
		_ = o.c.End(nil)
	}
	return rejected
}

// TestShadowDecidesAsEnforcementWould plays the same recorded traffic
// through an enforcing and a shadowed copy of each policy kind: the
// shadowed one lets everything through and would have rejected exactly
// the calls the enforcing one rejected.
func TestShadowDecidesAsEnforcementWould(t *testing.T) {
	traffic := recordTraffic(400, 3)
	for _, k := range policyKinds() {
		t.Run(k.name, func(t *testing.T) {
			clkE, clkS := sluice.NewManualClock(time.Second), sluice.NewManualClock(time.Second)
			pe, ps := k.make(t, clkE), k.make(t, clkS)
			enforcing := mustGuard(t, sluice.With(pe), sluice.WithClock(clkE))
			ev := &shadowEvents{}
			shadowed := mustGuard(t, sluice.With(ps), sluice.WithClock(clkS), sluice.WithObserver(ev),
				sluice.WithShadow(ps.Name()))

			want := play(t, enforcing, clkE, traffic)
			require.Zero(t, play(t, shadowed, clkS, traffic), "a shadowed policy rejects nothing")
			require.Positive(t, want, "the traffic must make the enforcing policy reject")
			assert.Equal(t, uint64(want), shadowed.Stats().Policies[0].ShadowRejected)
			assert.Equal(t, want, ev.shadow)
		})
	}
}

// TestSetLimitUnderTraffic changes every policy's numbers, back and forth,
// while 16 goroutines drive traffic through it: no panic, no race, and
// every admission is ended.
func TestSetLimitUnderTraffic(t *testing.T) {
	for _, k := range policyKinds() {
		t.Run(k.name, func(t *testing.T) {
			clk := sluice.NewManualClock(time.Second)
			p := k.make(t, clk)
			g := mustGuard(t, sluice.With(p), sluice.WithClock(clk), sluice.WithObserver(&events{}))
			changeUnderTraffic(t, g, p, liveChanges[k.name], func(w, i int) {
				if w == 0 && i%8 == 0 {
					clk.Advance(time.Millisecond)
				}
			})
			s := g.Stats().Policies[0]
			var ended uint64
			for _, n := range s.Outcomes {
				ended += n
			}
			assert.Equal(t, s.Admitted, ended, "every admitted call ended")
			assert.Positive(t, s.Admitted)
		})
	}
}

// TestSetLimitLosesNoQuota changes each limiter's numbers back and forth
// under traffic on a clock that stands still, so that nothing refills: a
// change that lost what the limiter had counted would admit more than its
// quotas allow. A token bucket keeps the tokens it lacks, so it admits at
// most the larger burst, 50; GCRA, the leaky bucket and the warm-up keep
// the instant they are full (or empty) again, a debt in time that the
// smaller burst of 2 may still leave room under, once: 50 + 2.
func TestSetLimitLosesNoQuota(t *testing.T) {
	bounds := map[string]uint64{
		"token-bucket": 50, "gcra": 52, "leaky-bucket": 52, "warm-up": 52,
		"fixed-window": 500, "sliding-window": 500, "sliding-log": 500,
		"shaper": 1, "keyed": 3 * 50,
	}
	for _, k := range policyKinds() {
		bound, ok := bounds[k.name]
		if !ok {
			continue // not a quota over time
		}
		t.Run(k.name, func(t *testing.T) {
			clk := sluice.NewManualClock(time.Second)
			p := k.make(t, clk)
			g := mustGuard(t, sluice.With(p), sluice.WithClock(clk), sluice.WithObserver(&events{}))
			changeUnderTraffic(t, g, p, liveChanges[k.name], func(int, int) {})
			s := g.Stats().Policies[0]
			assert.LessOrEqual(t, s.Admitted, bound)
			assert.Positive(t, s.Admitted)
			total := s.Admitted
			for _, n := range s.Rejected {
				total += n
			}
			assert.Equal(t, uint64(16*400), total)
		})
	}
}

// changeUnderTraffic drives 16 goroutines of 400 calls each through g
// (tick runs before each call, with the goroutine's and the call's
// numbers) while it applies changes to p in turn, until the traffic ends.
func changeUnderTraffic(t *testing.T, g *sluice.Guard, p sluice.Policy, changes []func(sluice.Policy) error, tick func(w, i int)) {
	t.Helper()
	require.Len(t, changes, 2)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			ctx := sluice.WithKey(t.Context(), []string{"a", "b", "c"}[w%3])
			for i := range 400 {
				tick(w, i)
				_ = g.Do(ctx, func(context.Context) error {
					if i%5 == 0 {
						return errors.New("boom")
					}
					return nil
				})
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	changed := 0
	for running := true; running; changed++ {
		select {
		case <-done:
			running = false
		default:
		}
		require.NoError(t, changes[changed%2](p))
	}
	assert.Greater(t, changed, 2)
}

// liveChanges are two changes of each kind's numbers, applied in turn.
var liveChanges = map[string][]func(sluice.Policy) error{
	"token-bucket": {
		func(p sluice.Policy) error { return p.(*ratelimit.TokenBucket).SetLimit(ratelimit.PerSecond(1000), 50) },
		func(p sluice.Policy) error { return p.(*ratelimit.TokenBucket).SetLimit(ratelimit.PerSecond(10), 2) },
	},
	"gcra": {
		func(p sluice.Policy) error { return p.(*ratelimit.GCRA).SetLimit(ratelimit.PerSecond(1000), 50) },
		func(p sluice.Policy) error { return p.(*ratelimit.GCRA).SetLimit(ratelimit.PerSecond(10), 2) },
	},
	"leaky-bucket": {
		func(p sluice.Policy) error { return p.(*ratelimit.LeakyBucket).SetLimit(ratelimit.PerSecond(1000), 50) },
		func(p sluice.Policy) error { return p.(*ratelimit.LeakyBucket).SetLimit(ratelimit.PerSecond(10), 2) },
	},
	"fixed-window": {
		func(p sluice.Policy) error { return p.(*ratelimit.FixedWindow).SetLimit(500, time.Second) },
		func(p sluice.Policy) error { return p.(*ratelimit.FixedWindow).SetLimit(3, 100*time.Millisecond) },
	},
	"sliding-window": {
		func(p sluice.Policy) error { return p.(*ratelimit.SlidingWindow).SetLimit(500, time.Second, 10) },
		func(p sluice.Policy) error {
			return p.(*ratelimit.SlidingWindow).SetLimit(3, 100*time.Millisecond, 4)
		},
	},
	"sliding-log": {
		func(p sluice.Policy) error { return p.(*ratelimit.SlidingLog).SetLimit(500, time.Second) },
		func(p sluice.Policy) error { return p.(*ratelimit.SlidingLog).SetLimit(3, 100*time.Millisecond) },
	},
	"warm-up": {
		func(p sluice.Policy) error {
			return p.(*ratelimit.WarmUp).SetLimit(ratelimit.PerSecond(1000), 50, time.Second, 3)
		},
		func(p sluice.Policy) error {
			return p.(*ratelimit.WarmUp).SetLimit(ratelimit.PerSecond(10), 2, 2*time.Second, 4)
		},
	},
	"shaper": {
		func(p sluice.Policy) error { return p.(*ratelimit.Shaper).SetLimit(ratelimit.PerSecond(1000), 0) },
		func(p sluice.Policy) error { return p.(*ratelimit.Shaper).SetLimit(ratelimit.PerSecond(10), 0) },
	},
	"keyed": {
		func(p sluice.Policy) error {
			return p.(*ratelimit.Keyed).SetLimit(func(q sluice.Policy) error {
				return q.(*ratelimit.TokenBucket).SetLimit(ratelimit.PerSecond(1000), 50)
			})
		},
		func(p sluice.Policy) error {
			return p.(*ratelimit.Keyed).SetLimit(func(q sluice.Policy) error {
				return q.(*ratelimit.TokenBucket).SetLimit(ratelimit.PerSecond(10), 2)
			})
		},
	},
	"breaker": {
		func(p sluice.Policy) error {
			return p.(*breaker.Breaker).Reconfigure(breaker.WithConsecutiveFailures(3), breaker.WithOpenDuration(time.Millisecond))
		},
		func(p sluice.Policy) error {
			return p.(*breaker.Breaker).Reconfigure(breaker.WithErrorCount(3, 5), breaker.WithCountWindow(10))
		},
	},
	"breaker-group": {
		func(p sluice.Policy) error {
			return p.(*breaker.Group).Reconfigure(breaker.WithErrorRatio(0.5, 4), breaker.WithCountWindow(8))
		},
		func(p sluice.Policy) error {
			return p.(*breaker.Group).Reconfigure(breaker.WithConsecutiveFailures(4), breaker.WithHalfOpenProbes(2, 0.5))
		},
	},
	"adaptive-throttle": {
		func(p sluice.Policy) error { return p.(*breaker.Adaptive).Reconfigure(breaker.WithMultiplier(1.5)) },
		func(p sluice.Policy) error {
			return p.(*breaker.Adaptive).Reconfigure(breaker.WithRollingWindow(time.Second, 4), breaker.WithMinThrottleRequests(2))
		},
	},
	"bulkhead": {
		func(p sluice.Policy) error { return p.(*adaptive.Shedder).Reconfigure(8) },
		func(p sluice.Policy) error { return p.(*adaptive.Shedder).Reconfigure(1) },
	},
}
