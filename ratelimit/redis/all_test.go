package redislimit

import (
	"context"
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
	user, err := NewGCRA(c, ratelimit.PerHour(5), 5, WithName(uniqueName("user")))
	require.NoError(t, err)
	route, err := NewFixedWindow(c, 2, time.Hour, WithName(uniqueName("route")), WithPerResource())
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
		d, tk := all.Admit(request("alice", st.route), 0)
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
	d, tk := all.Admit(request("bob", "/a"), 0)
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
	d1, tk := all.Admit(request("carol", "/a"), 0)
	require.True(t, d1.Allowed)
	all.Done(tk, sluice.Released, 0, 0)
	d2, tk := all.Admit(request("carol", "/a"), 0)
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
	l, err := NewGCRA(c, ratelimit.PerHour(1), 1, WithName(uniqueName("neg")), WithNegativeCache(100),
		WithObserver(func(e Event) {
			if e.Kind == EventFallback {
				fallbacks++
			}
		}))
	require.NoError(t, err)
	ctx := sluice.WithKey(t.Context(), "dave")
	d, _ := l.Admit(ctx, 0)
	require.True(t, d.Allowed)
	d, _ = l.Admit(ctx, time.Second)
	require.False(t, d.Allowed)
	retry := d.RetryAfter
	require.Greater(t, retry, 59*time.Minute)
	s.Stop() // from now on only the cache can answer as the limiter itself
	d, _ = l.Admit(ctx, 2*time.Second)
	require.False(t, d.Allowed)
	assert.Equal(t, l.Name(), d.Policy)
	assert.Equal(t, retry-time.Second, d.RetryAfter)
	assert.ErrorIs(t, d.Cause, sluice.ErrRateLimited)
	assert.Zero(t, fallbacks)
	// Another key is not cached: it goes to Redis, which is down.
	d, _ = l.Admit(sluice.WithKey(t.Context(), "erin"), 2*time.Second)
	assert.True(t, d.Allowed)
	assert.Equal(t, l.Name()+":open", d.Policy)
	// Once RetryAfter has passed, the key goes to Redis again.
	d, _ = l.Admit(ctx, time.Second+retry)
	assert.Equal(t, l.Name()+":open", d.Policy)
	assert.Equal(t, 2, fallbacks)
}
