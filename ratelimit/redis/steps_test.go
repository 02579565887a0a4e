package redislimit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// twinStep is one request of a scenario run against a Redis limiter and its
// local twin: its cost, and whether the admitted request is then released.
type twinStep struct {
	n       int64
	release bool
}

// twinScenario is the sequence every algorithm runs: fill the quota of 3,
// give one back, take it again, then ask for more than is left.
var twinScenario = []twinStep{{1, false}, {1, false}, {1, true}, {1, false}, {1, false}, {2, false}, {3, false}}

// TestStepsMatchLocalTwins runs the scenario through each Redis limiter (on
// Redis time, which moves a few microseconds between steps) and its local twin
// (at one fixed instant): the decisions agree on Allowed, Remaining and
// Cause; for the rate-based algorithms Reset and RetryAfter agree up to the
// time the scenario took, and for the windows they lie within the window.
func TestStepsMatchLocalTwins(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	const quota = 3
	// Windows are aligned to the epoch: one that turned during the scenario
	// would start the Redis limiter afresh while the twin, at one instant,
	// goes on. The window is picked so that it has room, and divides into
	// whole milliseconds.
	window := windowWithRoomAt(time.Now().UnixMilli(), quota*10*time.Second, 5*time.Second, quota*time.Millisecond)
	iv := window / quota
	twins := map[string]func() (sluice.Policy, error){
		"gcra":                    func() (sluice.Policy, error) { return ratelimit.NewGCRA(rateOf(iv), quota) },
		"token-bucket":            func() (sluice.Policy, error) { return ratelimit.NewTokenBucket(rateOf(iv), quota) },
		"fixed-window":            func() (sluice.Policy, error) { return ratelimit.NewFixedWindow(quota, window) },
		"sliding-window-weighted": func() (sluice.Policy, error) { return ratelimit.NewSlidingWindow(quota, window, 1) },
		"sliding-window":          func() (sluice.Policy, error) { return ratelimit.NewSlidingWindow(quota, window, ringOf(window)) },
	}
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			remote, err := alg.make(c, quota, iv, WithName(uniqueName(alg.name)), WithTimeout(5*time.Second))
			require.NoError(t, err)
			local, err := twins[alg.name]()
			require.NoError(t, err)
			windowed := alg.name == "fixed-window" || alg.name == "sliding-window" || alg.name == "sliding-window-weighted"
			const at = time.Hour
			start := time.Now()
			for i, st := range twinScenario {
				ctx := sluice.WithCost(context.Background(), st.n)
				rd, rt := admitD(remote, ctx, at)
				ld, lt := admitD(local, ctx, at)
				elapsed := time.Since(start) + time.Microsecond
				require.Equal(t, ld.Allowed, rd.Allowed, "step %d: local %+v, redis %+v", i, ld, rd)
				assert.Equal(t, ld.Remaining, rd.Remaining, "step %d: local %+v, redis %+v", i, ld, rd)
				assert.Equal(t, ld.Limit, rd.Limit, "step %d", i)
				assert.Equal(t, remote.Name(), rd.Policy)
				if windowed {
					assert.True(t, rd.Reset > 0 && rd.Reset <= 2*window, "step %d: reset %v", i, rd.Reset)
					if !rd.Allowed {
						assert.True(t, rd.RetryAfter > 0 && rd.RetryAfter <= 2*window, "step %d: retry %v", i, rd.RetryAfter)
					}
				} else {
					assert.True(t, rd.Reset <= ld.Reset && rd.Reset >= ld.Reset-elapsed, "step %d: reset redis %v local %v", i, rd.Reset, ld.Reset)
					assert.True(t, rd.RetryAfter <= ld.RetryAfter && rd.RetryAfter >= ld.RetryAfter-elapsed, "step %d: retry redis %v local %v", i, rd.RetryAfter, ld.RetryAfter)
				}
				if rd.Allowed {
					o := sluice.Success
					if st.release {
						o = sluice.Released
					}
					remote.Done(rt, o, at, 0)
					local.Done(lt, o, at, 0)
				} else {
					assert.ErrorIs(t, rd.Cause, sluice.ErrRateLimited)
				}
			}
		})
	}
}

// TestFixedWindowRejectionRetriesAtWindowEnd pins that a fixed window's
// rejection waits exactly until its window ends, which is also its Reset.
func TestFixedWindowRejectionRetriesAtWindowEnd(t *testing.T) {
	s := newServer(t)
	l, err := NewFixedWindow(newClient(t, s.Addr), 1, time.Hour, WithName(uniqueName("fw")))
	require.NoError(t, err)
	d, _ := admitD(l, t.Context(), 0)
	require.True(t, d.Allowed)
	d, _ = admitD(l, t.Context(), 0)
	require.False(t, d.Allowed)
	assert.Equal(t, d.Reset, d.RetryAfter)
	assert.True(t, d.RetryAfter > 0 && d.RetryAfter <= time.Hour)
}

// TestSlidingWindowWeighsThePreviousWindow pins the weighted count: with the
// previous window's count standing in Redis, fewer requests pass.
func TestSlidingWindowWeighsThePreviousWindow(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	name := uniqueName("sw")
	l, err := NewSlidingWindowWeighted(c, 10, time.Hour, WithName(name))
	require.NoError(t, err)
	d, _ := admitD(l, t.Context(), 0)
	require.True(t, d.Allowed)
	require.EqualValues(t, 9, d.Remaining)
	// Move this window's count of 1 into the previous window's place, as if
	// the window had just turned with 10 counted: the previous window then
	// weighs (1 - elapsed/window) × 10 of the quota.
	key, _ := l.limits[0].key(t.Context())
	w, err := c.HGet(t.Context(), key, "w").Int64()
	require.NoError(t, err)
	require.NoError(t, c.HSet(t.Context(), key, "w", w-1, "c", 10, "p", 0).Err())
	tm, err := c.Time(t.Context()).Result()
	require.NoError(t, err)
	elapsed := time.Duration(tm.UnixMicro()%time.Hour.Microseconds()) * time.Microsecond
	d, _ = admitD(l, t.Context(), 0)
	// The script compares without rounding: 10×(window−elapsed) + 1×window
	// ≤ 10×window. Early in the hour the previous window still weighs more
	// than 9, and the request is rejected.
	if 10*(time.Hour-elapsed) > 9*time.Hour {
		require.False(t, d.Allowed, "%+v", d)
		return
	}
	require.True(t, d.Allowed, "%+v", d)
	assert.InDelta(t, float64(10-1)-float64(10*(time.Hour-elapsed))/float64(time.Hour), float64(d.Remaining), 1)
}

// TestIntegerArithmetic pins what redis_rate #57 got wrong: 10 per second
// leaves 9 after the first request, not 9.999 rounded to something else.
func TestIntegerArithmetic(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	for _, alg := range algorithms {
		l, err := alg.make(c, 10, 100*time.Millisecond, WithName(uniqueName(alg.name)))
		require.NoError(t, err)
		d, _ := admitD(l, t.Context(), 0)
		require.True(t, d.Allowed, alg.name)
		assert.EqualValues(t, 10, d.Limit, alg.name)
		assert.EqualValues(t, 9, d.Remaining, alg.name)
		// Stored instants are whole microseconds in plain digits, never in
		// a float's exponent form.
		key, _ := l.limits[0].key(t.Context())
		var stored string
		switch alg.name {
		case "gcra":
			stored, err = c.Get(t.Context(), key).Result()
		case "sliding-window": // the newest bucket's index, then the counts
			stored, err = c.Get(t.Context(), key).Result()
			stored, _, _ = strings.Cut(stored, " ")
		default:
			field := map[string]string{"token-bucket": "l", "fixed-window": "w", "sliding-window-weighted": "w"}[alg.name]
			stored, err = c.HGet(t.Context(), key, field).Result()
		}
		require.NoError(t, err)
		_, err = strconv.ParseInt(stored, 10, 64)
		assert.NoError(t, err, "%s stored %q", alg.name, stored)
	}
}

func TestNeverSatisfiable(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	for _, alg := range algorithms {
		l, err := alg.make(c, 3, time.Second, WithName(uniqueName(alg.name)))
		require.NoError(t, err)
		d, tk := admitD(l, sluice.WithCost(t.Context(), 4), 0)
		assert.False(t, d.Allowed)
		assert.Zero(t, tk)
		assert.True(t, errors.Is(d.Cause, ratelimit.ErrNeverSatisfiable), alg.name)
		assert.Equal(t, l.Name(), d.Policy)
	}
}

// TestRejectedWritesNothing pins that a rejection leaves Redis untouched: the
// key's state and TTL are the same after it.
func TestRejectedWritesNothing(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	for _, alg := range algorithms {
		l, err := alg.make(c, 1, longWindow(), WithName(uniqueName(alg.name)))
		require.NoError(t, err)
		d, _ := admitD(l, t.Context(), 0)
		require.True(t, d.Allowed)
		key, _ := l.limits[0].key(t.Context())
		before, err := c.Dump(t.Context(), key).Result()
		require.NoError(t, err)
		ttl, err := c.PTTL(t.Context(), key).Result()
		require.NoError(t, err)
		d, _ = admitD(l, t.Context(), 0)
		require.False(t, d.Allowed)
		after, err := c.Dump(t.Context(), key).Result()
		require.NoError(t, err)
		assert.Equal(t, before, after, alg.name)
		ttl2, err := c.PTTL(t.Context(), key).Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, ttl2, ttl, alg.name)
		assert.Greater(t, ttl2, time.Duration(0), alg.name)
	}
}

func TestConstructorsValidate(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	cases := map[string]error{}
	_, cases["nil client"] = NewGCRA(nil, ratelimit.PerSecond(1), 1)
	plain := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer plain.Close()
	_, cases["client without context timeouts"] = NewGCRA(plain, ratelimit.PerSecond(1), 1)
	_, cases["zero rate"] = NewGCRA(c, ratelimit.Rate{}, 1)
	_, cases["zero burst"] = NewTokenBucket(c, ratelimit.PerSecond(1), 0)
	_, cases["sub-µs interval"] = NewGCRA(c, ratelimit.PerSecond(2_000_000), 1)
	_, cases["huge burst"] = NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 1<<40)
	_, cases["zero limit"] = NewFixedWindow(c, 0, time.Second)
	_, cases["sub-µs window"] = NewSlidingWindowWeighted(c, 1, 1500*time.Nanosecond)
	_, cases["huge weighted window limit"] = NewSlidingWindowWeighted(c, 1<<40, time.Hour)
	_, cases["huge fixed window limit"] = NewFixedWindow(c, 1<<53, time.Hour)
	_, cases["braced name"] = NewGCRA(c, ratelimit.PerSecond(1), 1, WithName("a{b}"))
	_, cases["braced prefix"] = NewGCRA(c, ratelimit.PerSecond(1), 1, WithPrefix("{p}"))
	_, cases["bad timeout"] = NewGCRA(c, ratelimit.PerSecond(1), 1, WithTimeout(0))
	_, cases["bad breaker"] = NewGCRA(c, ratelimit.PerSecond(1), 1, WithBreaker(0, time.Second))
	_, cases["no instances"] = NewGCRA(c, ratelimit.PerSecond(1), 1, WithLocalFallback(0))
	_, cases["nil key func"] = NewGCRA(c, ratelimit.PerSecond(1), 1, WithKeyFunc(nil))
	_, cases["nil observer"] = NewGCRA(c, ratelimit.PerSecond(1), 1, WithObserver(nil))
	_, cases["bad negative cache"] = NewGCRA(c, ratelimit.PerSecond(1), 1, WithNegativeCache(0))
	_, cases["empty All"] = All(nil)
	_, cases["fail open and closed"] = NewGCRA(c, ratelimit.PerSecond(1), 1, WithFailOpen(), WithFailClosed())
	_, cases["fail closed and open"] = NewGCRA(c, ratelimit.PerSecond(1), 1, WithFailClosed(), WithFailOpen())
	_, cases["fail open and local"] = NewFixedWindow(c, 1, time.Second, WithFailOpen(), WithLocalFallback(2))
	_, cases["fail local and closed"] = NewTokenBucket(c, ratelimit.PerSecond(1), 1, WithLocalFallback(2), WithFailClosed())
	_, cases["fail closed twice"] = NewGCRA(c, ratelimit.PerSecond(1), 1, WithFailClosed(), WithFailClosed())
	_, cases["two observers"] = NewGCRA(c, ratelimit.PerSecond(1), 1, WithObserver(func(Event) {}), WithObserver(func(Event) {}))
	g, err := NewGCRA(c, ratelimit.PerSecond(1), 1)
	require.NoError(t, err)
	_, cases["All with a member option"] = All([]*Limiter{g}, WithFailClosed())
	_, cases["All with a nil limiter"] = All([]*Limiter{g, nil})
	other := newClient(t, s.Addr)
	g2, err := NewGCRA(other, ratelimit.PerSecond(1), 1)
	require.NoError(t, err)
	_, cases["All across clients"] = All([]*Limiter{g, g2})
	for name, err := range cases {
		assert.Error(t, err, name)
	}
	_, err = NewGCRA(c, ratelimit.PerSecond(1), 1, WithFailOpen(), WithFailClosed())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WithFailClosed: the failure policy is set already, by WithFailOpen")
	for _, o := range []Option{WithFailOpen(), WithFailClosed(), WithLocalFallback(2)} {
		_, err := NewGCRA(c, ratelimit.PerSecond(1), 1, o)
		assert.NoError(t, err, "one failure policy alone is fine")
	}
}
