package redislimit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

// otherRelease counts the decide calls of key "hot" and, at the first one
// once armed, releases a ticket of another key before the call goes on:
// a Guard whose later policy turned a request away, on another key.
type otherRelease struct {
	mu      sync.Mutex
	armed   bool
	hotKey  string
	hot     int
	release func()
}

func (h *otherRelease) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *otherRelease) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *otherRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(a) > 4 && fmt.Sprint(a[3]) == h.hotKey && a[4] != "r" {
			h.mu.Lock()
			var rel func()
			if h.armed {
				h.hot++
				if h.hot == 1 {
					rel = h.release
				}
			}
			h.mu.Unlock()
			if rel != nil {
				rel()
			}
		}
		return next(ctx, cmd)
	}
}

// A release on another key while key "hot"'s rejection is on its way from
// Redis leaves the cache to remember hot's rejection, which no refund of
// the other key can touch: one count of forgets for every key would make
// a cache behind an open breaker (every admitted request released)
// remember nothing.
func TestTheNegativeCacheKeepsARejectionWhenAnotherKeyIsReleased(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	window := windowWithRoom(10*time.Hour, time.Hour)
	l, err := NewFixedWindow(c, 1, window, WithName(uniqueName("neg-gen")), WithNegativeCache(16),
		WithTimeout(10*time.Second), WithoutCoalescing())
	require.NoError(t, err)
	const at = time.Hour
	hot := sluice.WithKey(context.Background(), "hot")
	hotKey, _ := l.limits[0].key(hot)
	// A key of another stripe than hot's: one of its own stripe may void
	// hot's rejection, as the cache cannot tell them apart.
	var other context.Context
	for i := 0; other == nil; i++ {
		ctx := sluice.WithKey(context.Background(), fmt.Sprint("other", i))
		if k, _ := l.limits[0].key(ctx); l.neg.stripe(k) != l.neg.stripe(hotKey) {
			other = ctx
		}
	}

	d, tk := l.admit(hot, at) // hot spent for the window
	require.True(t, d.Allowed, "%+v", d)
	l.Done(tk, sluice.Success, at, 0)
	d, otk := l.admit(other, at)
	require.True(t, d.Allowed, "%+v", d)

	h := &otherRelease{hotKey: hotKey, release: func() { l.Done(otk, sluice.Released, at, 0) }}
	c.AddHook(h)
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()

	d, _ = l.admit(hot, at) // Redis rejects; "other" released meanwhile
	require.False(t, d.Allowed, "%+v", d)
	d, _ = l.admit(hot, at) // remembered: not asked of Redis again
	require.False(t, d.Allowed, "%+v", d)

	h.mu.Lock()
	defer h.mu.Unlock()
	require.Equal(t, 1, h.hot, "hot's rejection was not remembered because another key was released")
}
