package redislimit

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// perUserAndRoute is a per-user limit of 5 and a per-user-and-route limit of
// 2, decided together.
func perUserAndRoute(t *testing.T, c redis.UniversalClient) (*Limiter, *Limiter, *Limiter) {
	user, err := NewGCRA(c, ratelimit.Rate{Count: 5, Period: time.Hour}, 5, WithName(uniqueName("user")))
	require.NoError(t, err)
	route, err := NewFixedWindow(c, 2, longWindow(), WithName(uniqueName("route")), WithPerResource())
	require.NoError(t, err)
	all, err := All([]*Limiter{user, route}, WithName(uniqueName("all")))
	require.NoError(t, err)
	return user, route, all
}

func request(user, route string) context.Context {
	return sluice.WithResource(sluice.WithKey(context.Background(), user), route)
}

// checkAllOrNothing walks the per-user and per-route limits through a
// rejection by one of them, which must charge neither.
func checkAllOrNothing(t *testing.T, c redis.UniversalClient) {
	_, _, all := perUserAndRoute(t, c)
	steps := []struct {
		route     string
		allowed   bool
		remaining int64
		limit     int64
	}{
		{"/a", true, 1, 2},  // user 4 left, route /a 1: the tightest is the route
		{"/a", true, 0, 2},  // user 3, route /a 0
		{"/a", false, 0, 2}, // route /a rejects: the user is not charged
		{"/b", true, 1, 2},  // user 2 (not 1), route /b 1
		{"/b", true, 0, 2},  // user 1, route /b 0
		{"/c", true, 0, 5},  // user 0, route /c 1: the tightest is the user
		{"/d", false, 0, 5}, // the user rejects
	}
	for i, st := range steps {
		d, tk := admitD(all, request("alice", st.route), 0)
		require.Equal(t, st.allowed, d.Allowed, "step %d: %+v", i, d)
		assert.Equal(t, st.remaining, d.Remaining, "step %d: %+v", i, d)
		assert.Equal(t, st.limit, d.Limit, "step %d: %+v", i, d)
		assert.Equal(t, all.Name(), d.Policy)
		if d.Allowed {
			all.Done(tk, sluice.Success, 0, 0)
		} else {
			assert.ErrorIs(t, d.Cause, sluice.ErrRateLimited)
			assert.Positive(t, d.RetryAfter)
		}
	}
	// Another user is untouched.
	d, tk := admitD(all, request("bob", "/a"), 0)
	require.True(t, d.Allowed)
	all.Done(tk, sluice.Released, 0, 0)
}

func TestAllIsAllOrNothing(t *testing.T) {
	s := newServer(t)
	checkAllOrNothing(t, newClient(t, s.Addr))
}

func TestAllReleaseGivesBackEveryLimit(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	_, _, all := perUserAndRoute(t, c)
	d1, tk := admitD(all, request("carol", "/a"), 0)
	require.True(t, d1.Allowed)
	all.Done(tk, sluice.Released, 0, 0)
	d2, tk := admitD(all, request("carol", "/a"), 0)
	require.True(t, d2.Allowed)
	assert.Equal(t, d1.Remaining, d2.Remaining)
	all.Done(tk, sluice.Success, 0, 0)
}

func TestAllSharesOneSlotPerUser(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	user, route, _ := perUserAndRoute(t, c)
	ctx := request("{hostile}", "/x")
	k1, h1 := user.limits[0].key(ctx)
	k2, h2 := route.limits[0].key(ctx)
	assert.Equal(t, h1, h2)
	assert.NotEqual(t, k1, k2)
	assert.Equal(t, hashTag(k1), hashTag(k2))
}

// hashTag returns what Redis Cluster hashes of key: the part between the
// first '{' and the next '}', when not empty.
func hashTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						return key[i+1 : j]
					}
					return key
				}
			}
			return key
		}
	}
	return key
}

func TestNegativeCacheRejectsWithoutRedis(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	var fallbacks int
	l, err := NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 1, WithName(uniqueName("neg")), WithNegativeCache(100),
		WithObserver(func(e Event) {
			if e.Kind == EventFallback {
				fallbacks++
			}
		}))
	require.NoError(t, err)
	ctx := sluice.WithKey(t.Context(), "dave")
	d, _ := admitD(l, ctx, 0)
	require.True(t, d.Allowed)
	d, _ = admitD(l, ctx, time.Second)
	require.False(t, d.Allowed)
	retry := d.RetryAfter
	require.Greater(t, retry, 59*time.Minute)
	s.Stop() // from now on only the cache can answer as the limiter itself
	d, _ = admitD(l, ctx, 2*time.Second)
	require.False(t, d.Allowed)
	assert.Equal(t, l.Name(), d.Policy)
	assert.Equal(t, retry-time.Second, d.RetryAfter)
	assert.ErrorIs(t, d.Cause, sluice.ErrRateLimited)
	assert.Zero(t, fallbacks)
	// Another key is not cached: it goes to Redis, which is down.
	d, _ = admitD(l, sluice.WithKey(t.Context(), "erin"), 2*time.Second)
	assert.True(t, d.Allowed)
	assert.Equal(t, l.Name()+":open", d.Policy)
	// Once RetryAfter has passed, the key goes to Redis again.
	d, _ = admitD(l, ctx, time.Second+retry)
	assert.Equal(t, l.Name()+":open", d.Policy)
	assert.Equal(t, 2, fallbacks)
}

// A costly request's rejection is not remembered: a cheaper request that
// fits still goes to Redis and is admitted.
func TestNegativeCacheKeepsNoCostlyRejection(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	l, err := NewTokenBucket(c, ratelimit.PerSecond(1), 10, WithName(uniqueName("negcost")), WithNegativeCache(100))
	require.NoError(t, err)
	ctx := sluice.WithKey(t.Context(), "frank")
	d, _ := admitD(l, sluice.WithCost(ctx, 7), 0)
	require.True(t, d.Allowed)
	d, _ = admitD(l, sluice.WithCost(ctx, 8), 0)
	require.False(t, d.Allowed, "8 do not fit in the 3 left")
	d, _ = admitD(l, ctx, 0)
	assert.True(t, d.Allowed, "1 fits: %+v", d)
}

// Under All, each key remembers its own limit's rejection: a request to
// another route is not turned away for the longer wait of the route limit.
func TestNegativeCacheUnderAllKeepsEachLimitsOwnWait(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	user, err := NewFixedWindow(c, 1, time.Second, WithName(uniqueName("neguser")))
	require.NoError(t, err)
	route, err := NewFixedWindow(c, 1, longWindow(), WithName(uniqueName("negroute")), WithPerResource())
	require.NoError(t, err)
	both, err := All([]*Limiter{user, route}, WithName(uniqueName("negall")), WithNegativeCache(100))
	require.NoError(t, err)
	a := sluice.WithResource(sluice.WithKey(t.Context(), "gina"), "/a")
	d, tk := admitD(both, a, 0)
	require.True(t, d.Allowed)
	both.Done(tk, sluice.Success, 0, 0)
	d, _ = admitD(both, a, 0)
	require.False(t, d.Allowed)
	require.Greater(t, d.RetryAfter, 20*time.Second, "the route limit's wait")
	// The per-user key was cached with its own wait (under a second), so a
	// later request to another route goes to Redis.
	var got sluice.Decision
	start := time.Now()
	deadline := start.Add(5 * time.Second)
	for time.Now().Before(deadline) {
		now := 2*time.Second + time.Since(start) // the limiter's instants follow real time, as Redis's do
		got, tk = admitD(both, sluice.WithResource(sluice.WithKey(t.Context(), "gina"), "/b"), now)
		if got.Allowed {
			both.Done(tk, sluice.Success, 0, 0)
			break
		}
		require.Less(t, got.RetryAfter, 2*time.Second, "a per-second limit's wait, not an hour's: %+v", got)
		time.Sleep(100 * time.Millisecond) // Redis keeps its own time: wait for its next second
	}
	assert.True(t, got.Allowed, "%+v", got)
}

// longWindow is a window of about an hour whose current instance has at
// least a minute left. Fixed windows are aligned to the epoch, so an hour's
// window ends on the hour; a test that needs a long wait ahead of it picks a
// length whose boundary is not near.
func longWindow() time.Duration { return windowWithRoom(time.Hour, time.Minute) }

// windowWithRoom is a window of about base whose current instance has at
// least room left, the same for any window aligned to the epoch.
// It is a whole number of milliseconds: the limiters take whole
// microseconds, and the room left is measured in milliseconds.
func windowWithRoom(base, room time.Duration) time.Duration {
	return windowWithRoomAt(time.Now().UnixMilli(), base, room, time.Millisecond)
}

// windowWithRoomAt is windowWithRoom at the instant nowMs, in Unix
// milliseconds, for a window that is a multiple of unit, itself a whole
// number of milliseconds.
func windowWithRoomAt(nowMs int64, base, room, unit time.Duration) time.Duration {
	p := base.Truncate(unit)
	step := max((base / 512).Truncate(unit), unit)
	for p-time.Duration(nowMs%p.Milliseconds())*time.Millisecond < room {
		p += step
	}
	return p
}

// The windows the tests pick are whole milliseconds, which the limiters
// take (whole microseconds) and in which the room left is measured, and
// the window current at any instant has the room asked for.
func TestWindowWithRoomIsWholeMillisecondsWithRoom(t *testing.T) {
	for _, base := range []time.Duration{time.Minute, time.Hour, 30 * time.Second} {
		room := base / 6
		for nowMs := int64(1_763_800_000_000); nowMs < 1_763_800_000_000+2*base.Milliseconds(); nowMs += 997 {
			p := windowWithRoomAt(nowMs, base, room, 3*time.Millisecond)
			require.Zero(t, p%(3*time.Millisecond), "base %v at %d: window %v", base, nowMs, p)
			left := p - time.Duration(nowMs%p.Milliseconds())*time.Millisecond
			require.GreaterOrEqual(t, left, room, "base %v at %d: window %v", base, nowMs, p)
		}
	}
}

// A limiter reconfigured with another window under the same name starts
// afresh: the period is part of its key, so state kept on another time scale
// is never read.
func TestWindowChangeStartsAfresh(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	name := uniqueName("regrow")
	short, err := NewFixedWindow(c, 5, time.Second, WithName(name))
	require.NoError(t, err)
	ctx := sluice.WithKey(t.Context(), "hank")
	for range 5 {
		d, tk := admitD(short, ctx, 0)
		require.True(t, d.Allowed)
		short.Done(tk, sluice.Success, 0, 0)
	}
	window := windowWithRoom(time.Minute, 10*time.Second) // no turn during the six calls
	long, err := NewFixedWindow(c, 5, window, WithName(name))
	require.NoError(t, err)
	for i := range 5 {
		d, tk := admitD(long, ctx, 0)
		require.True(t, d.Allowed, "call %d in the new window", i)
		long.Done(tk, sluice.Success, 0, 0)
	}
	d, _ := admitD(long, ctx, 0)
	require.False(t, d.Allowed)
	assert.LessOrEqual(t, d.RetryAfter, window)
	assert.Greater(t, d.RetryAfter, time.Duration(0))
}

func TestMicrosSaturates(t *testing.T) {
	assert.Equal(t, time.Duration(0), micros(-5))
	assert.Equal(t, 3*time.Millisecond, micros(3000))
	assert.Equal(t, time.Duration(math.MaxInt64), micros(math.MaxInt64/10))
}

// Under All, the negative cache answers a repeated rejection with the
// longest wait of the limits that rejected, as Redis did.
func TestNegativeCacheUnderAllAnswersTheLongestWait(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	short, err := NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Minute}, 1, WithName(uniqueName("short")))
	require.NoError(t, err)
	long, err := NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 1, WithName(uniqueName("long")))
	require.NoError(t, err)
	all, err := All([]*Limiter{short, long}, WithName(uniqueName("all")), WithNegativeCache(100))
	require.NoError(t, err)
	ctx := sluice.WithKey(context.Background(), "ivy")
	d, tk := admitD(all, ctx, 0)
	require.True(t, d.Allowed)
	all.Done(tk, sluice.Success, 0, 0)
	first, _ := admitD(all, ctx, 0) // from Redis: both reject, the hour's wait
	require.False(t, first.Allowed)
	require.Greater(t, first.RetryAfter, 50*time.Minute, "%+v", first)
	again, _ := admitD(all, ctx, 0) // from the negative cache
	require.False(t, again.Allowed)
	require.Greater(t, again.RetryAfter, 50*time.Minute, "%+v", again)
}

// All refuses a limit given twice, which it would charge once and give back
// twice: the same limiter, or two sharing a name, algorithm and period.
func TestAllRefusesALimitTwice(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	l, err := NewFixedWindow(c, 3, time.Hour, WithName(uniqueName("twice")))
	require.NoError(t, err)
	_, err = All([]*Limiter{l, l})
	require.ErrorContains(t, err, "appears twice")
	twin, err := NewFixedWindow(c, 5, time.Hour, WithName(l.Name()))
	require.NoError(t, err)
	_, err = All([]*Limiter{l, twin})
	require.ErrorContains(t, err, "appears twice")
	perRoute, err := NewFixedWindow(c, 5, time.Hour, WithName(l.Name()), WithPerResource())
	require.NoError(t, err)
	_, err = All([]*Limiter{l, perRoute})
	require.NoError(t, err, "per user and per user and route are two limits")
}
