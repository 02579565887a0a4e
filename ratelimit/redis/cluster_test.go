package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redistest"
	"github.com/sluice-go/sluice/ratelimit"
)

// TestCluster runs every algorithm, All, and keys with hostile braces on a
// 3-master Redis Cluster.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	for _, s := range cl.Servers {
		t.Cleanup(func() { checkTTLs(t, s) })
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
		return m.Ping(ctx).Err()
	}))

	hostile := []string{"{a}", "}{", "{", "{}x", "user{0}", "{{x}}", "plain"}
	t.Run("algorithms", func(t *testing.T) {
		for _, alg := range algorithms {
			l, err := alg.make(c, 3, time.Hour, WithName(uniqueName(alg.name)), WithTimeout(2*time.Second))
			require.NoError(t, err)
			for _, key := range hostile {
				ctx := sluice.WithKey(t.Context(), key)
				for i := range 4 {
					d, tk := admitD(l, ctx, 0)
					require.Equal(t, l.Name(), d.Policy, "%s key %q: %+v", alg.name, key, d)
					require.Equal(t, i < 3, d.Allowed, "%s key %q call %d: %+v", alg.name, key, i, d)
					if d.Allowed {
						require.EqualValues(t, 2-i, d.Remaining)
						l.Done(tk, sluice.Success, 0, 0)
					}
				}
			}
		}
	})

	t.Run("hostile keys hash into the limiter's slot", func(t *testing.T) {
		l, err := NewGCRA(c, ratelimit.PerSecond(1), 1, WithName(uniqueName("slots")))
		require.NoError(t, err)
		slots := map[int]bool{}
		for _, key := range append(hostile, "{a}1", "{a}2", "{a}3", "{a}4", "{a}5", "{a}6") {
			k, _ := l.limits[0].key(sluice.WithKey(t.Context(), key))
			h := hashKey(key)
			tag := string(appendHashHex(nil, h))
			assert.Equal(t, tag, hashTag(k))
			slot := cl.KeySlot(t, k)
			assert.Equal(t, cl.KeySlot(t, tag), slot, "key %q", key)
			if len(key) == 4 && key[:3] == "{a}" {
				slots[slot] = true
			}
		}
		// A user key's own braces do not choose the slot: "{a}1" … "{a}6"
		// would all share the slot of "a" if they did.
		assert.Greater(t, len(slots), 1)
	})

	t.Run("All in one slot", func(t *testing.T) { checkAllOrNothing(t, c) })

	t.Run("a hot key's queued requests coalesce", func(t *testing.T) {
		// With a key's flights held at the door, the other requests queue
		// and go to the key's master in one batch, which decides exactly
		// the quota.
		const quota, requests = 20, 40
		hc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = hc.Close() })
		for _, alg := range algorithms {
			hook := &gateHook{}
			hc.AddHook(hook)
			l, err := alg.make(hc, quota, time.Hour, WithName(uniqueName(alg.name)), WithTimeout(20*time.Second))
			require.NoError(t, err)
			gate := holdFlights(hook)
			ctx := sluice.WithKey(t.Context(), "{hot}")
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range requests {
				wg.Go(func() {
					d, tk := admitD(l, ctx, 0)
					if d.Policy != l.Name() {
						t.Errorf("%s: decided by %s", alg.name, d.Policy)
						return
					}
					if d.Allowed {
						admitted.Add(1)
						l.Done(tk, sluice.Success, 0, 0)
					}
				})
			}
			awaitQueue(t, l, requests-maxFlights)
			close(gate)
			wg.Wait()
			hook.before = nil
			assert.EqualValues(t, quota, admitted.Load(), alg.name)
			// maxFlights calls of a request each, then one batch (a
			// NOSCRIPT answer sends a script again as EVAL, which the hook
			// does not count).
			assert.Equal(t, int64(maxFlights+1), hook.calls.Load(), alg.name)
		}
	})

	t.Run("concurrent decisions", func(t *testing.T) {
		user, err := NewGCRA(c, ratelimit.Rate{Count: 400, Period: time.Hour}, 400, WithName(uniqueName("user")), WithTimeout(2*time.Second))
		require.NoError(t, err)
		route, err := NewSlidingWindowWeighted(c, 1000, time.Hour, WithName(uniqueName("route")), WithPerResource(), WithTimeout(2*time.Second))
		require.NoError(t, err)
		all, err := All([]*Limiter{user, route})
		require.NoError(t, err)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 60 {
					// Four users on different slots, two routes each.
					ctx := request(fmt.Sprintf("u%d", g%4), fmt.Sprintf("/r%d", i%2))
					d, tk := admitD(all, ctx, 0)
					if d.Policy != all.Name() {
						t.Errorf("decided by %s", d.Policy)
						return
					}
					if d.Allowed {
						admitted.Add(1)
						all.Done(tk, sluice.Success, 0, 0)
					}
				}
			})
		}
		wg.Wait()
		// Each user made 120 requests, under its limit of 400: all admitted.
		assert.EqualValues(t, 8*60, admitted.Load())
	})

	t.Run("All across slots", func(t *testing.T) {
		var log eventLog
		byUser, err := NewGCRA(c, ratelimit.Rate{Count: 5, Period: time.Hour}, 5, WithName(uniqueName("user")))
		require.NoError(t, err)
		byRoute, err := NewGCRA(c, ratelimit.Rate{Count: 5, Period: time.Hour}, 5, WithName(uniqueName("route")),
			WithKeyFunc(func(ctx context.Context) string { r, _ := sluice.ResourceFrom(ctx); return r }))
		require.NoError(t, err)
		all, err := All([]*Limiter{byUser, byRoute}, WithObserver(log.observe))
		require.NoError(t, err)
		d, _ := admitD(all, request("gina", "/a"), 0)
		assert.True(t, d.Allowed)
		assert.Equal(t, byUser.Name()+":open", d.Policy)
		log.mu.Lock()
		defer log.mu.Unlock()
		require.NotEmpty(t, log.events)
		assert.True(t, errors.Is(log.events[0].Err, ErrCrossSlot))
	})
}
