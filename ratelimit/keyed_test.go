package ratelimit

import (
	"context"
	"errors"
	"hash/maphash"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/policytest"
)

func mustKeyed(t testing.TB, newLimiter func(string) (sluice.Policy, error), opts ...Option) *Keyed {
	t.Helper()
	k, err := NewKeyed(newLimiter, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = k.Close() })
	return k
}

// fixedPer returns a newLimiter making fixed windows of limit per window,
// counting how many it made.
func fixedPer(limit int64, window time.Duration, made *atomic.Int64) func(string) (sluice.Policy, error) {
	return func(string) (sluice.Policy, error) {
		if made != nil {
			made.Add(1)
		}
		return NewFixedWindow(limit, window)
	}
}

func keyCtx(key string) context.Context { return sluice.WithKey(context.Background(), key) }

// sameShard returns n distinct keys that land in the same shard of k.
func sameShard(k *Keyed, n int) []string {
	var keys []string
	want := maphash.String(k.seed, "k0") & k.mask
	for i := 0; len(keys) < n; i++ {
		key := "k" + strconv.Itoa(i)
		if maphash.String(k.seed, key)&k.mask == want {
			keys = append(keys, key)
		}
	}
	return keys
}

func TestKeyedLimitsEachKeyOnItsOwn(t *testing.T) {
	k := mustKeyed(t, fixedPer(2, time.Second, nil), WithName("ratelimit/per-ip"))
	runSteps(t, keyedAs(k, "10.0.0.1"), []step{
		{at: 0, allowed: true, remaining: 1, reset: time.Second},
		{at: 0, allowed: true, remaining: 0, reset: time.Second},
		{at: 10 * ms, allowed: false, remaining: 0, reset: 990 * ms, retryAfter: 990 * ms},
	})
	runSteps(t, keyedAs(k, "10.0.0.2"), []step{
		{at: 10 * ms, allowed: true, remaining: 1, reset: 990 * ms, release: true},
		{at: 10 * ms, n: 2, allowed: true, remaining: 0, reset: 990 * ms},
	})
	d := decideKeyAt(k, 20*ms, "10.0.0.1", 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, "ratelimit/per-ip", d.Policy)
	assert.True(t, allowKeyAt(k, 20*ms, "10.0.0.3"))
	assert.Equal(t, 3, k.Len())
}

// keyedAs is k with every request carrying key.
func keyedAs(k *Keyed, key string) sluice.Policy {
	return keyedWith{k, func(time.Duration) string { return key }}
}

type keyedWith struct {
	*Keyed
	key func(now time.Duration) string
}

func (p keyedWith) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return p.Keyed.Admit(sluice.WithKey(ctx, p.key(now)), now)
}

func TestKeyedEvictsTheLeastRecentlyUsedKey(t *testing.T) {
	var made atomic.Int64
	k := mustKeyed(t, fixedPer(1, time.Hour, &made), WithMaxKeys(4))
	keys := sameShard(k, 5)
	s := &k.shards[maphash.String(k.seed, keys[0])&k.mask]
	require.Equal(t, 4, s.cap, "one shard")
	made.Store(0)
	for _, key := range keys[:4] {
		require.True(t, allowKeyAt(k, 0, key))
	}
	require.False(t, allowKeyAt(k, 0, keys[0]), "keys[0] is now the most recent")
	require.True(t, allowKeyAt(k, 0, keys[4]), "a fifth key evicts keys[1]")
	assert.Equal(t, int64(5), made.Load())
	assert.False(t, allowKeyAt(k, 0, keys[0]), "keys[0] kept its limiter")
	assert.True(t, allowKeyAt(k, 0, keys[1]), "keys[1] was evicted and starts afresh")
	assert.Equal(t, int64(6), made.Load())
	assert.Equal(t, 4, len(s.m))
}

// spy is a policy that records the Dones it hears.
type spy struct {
	name  string
	mu    sync.Mutex
	dones []sluice.Ticket
	next  sluice.Ticket
}

func (s *spy) Name() string { return s.name }
func (s *spy) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	return s.next, sluice.Quota{Limit: -1}, nil
}
func (s *spy) Needs() sluice.Needs { return 0 }
func (s *spy) Done(t sluice.Ticket, _ sluice.Outcome, _, _ time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dones = append(s.dones, t)
}

func TestKeyedDoneReachesTheAdmittingLimiterAfterEviction(t *testing.T) {
	spies := map[string]*spy{}
	var mu sync.Mutex
	k := mustKeyed(t, func(key string) (sluice.Policy, error) {
		mu.Lock()
		defer mu.Unlock()
		s := &spy{name: key, next: 100}
		if key != "" {
			spies[key] = s
		}
		return s, nil
	}, WithMaxKeys(1))
	d, ta := admit(k, keyCtx("a"), 0)
	require.True(t, d.Allowed)
	assert.Equal(t, "ratelimit/keyed", d.Policy)
	require.True(t, k.Forget("a"))
	_, tb := admit(k, keyCtx("b"), 0)
	require.Equal(t, 1, k.Len())
	first := spies["a"]
	k.Done(ta, sluice.Success, ms, ms)
	k.Done(ta, sluice.Success, ms, ms) // a second Done of one ticket is ignored
	k.Done(tb, sluice.Released, ms, ms)
	assert.Equal(t, []sluice.Ticket{101}, first.dones)
	assert.Equal(t, []sluice.Ticket{101}, spies["b"].dones)
	_, ta2 := admit(k, keyCtx("a"), ms) // a fresh limiter for "a"
	k.Done(ta2, sluice.Success, ms, 0)
	assert.Equal(t, []sluice.Ticket{101}, first.dones)
	assert.Equal(t, []sluice.Ticket{101}, spies["a"].dones)
}

func TestKeyedReleasedRefundsTheKey(t *testing.T) {
	k := mustKeyed(t, fixedPer(1, time.Second, nil))
	d, tk := admit(k, keyCtx("u1"), 0)
	require.True(t, d.Allowed)
	require.False(t, allowKeyAt(k, 0, "u1"))
	k.Done(tk, sluice.Released, 0, 0)
	assert.True(t, allowKeyAt(k, 0, "u1"))
}

func TestKeyedIdleKeysExpire(t *testing.T) {
	var made atomic.Int64
	k := mustKeyed(t, fixedPer(1, time.Minute, &made), WithIdleTTL(time.Minute), WithMaxKeys(1000))
	made.Store(0)
	require.True(t, allowKeyAt(k, 0, "a"))
	require.False(t, allowKeyAt(k, 59*time.Second, "a"), "still held, last used at 59s")
	require.True(t, allowKeyAt(k, 118*time.Second, "a"), "idle 59s only: still held, in its next window")
	assert.Equal(t, int64(1), made.Load())
	require.True(t, allowKeyAt(k, 178*time.Second, "a"), "idle a minute: a fresh limiter")
	assert.Equal(t, int64(2), made.Load())

	// A new key drops at most two expired keys of its shard on its way in.
	k = mustKeyed(t, fixedPer(1, time.Minute, nil), WithIdleTTL(time.Minute), WithMaxKeys(1000))
	keys := sameShard(k, 4)
	for _, key := range keys[:3] {
		allowKeyAt(k, time.Hour, key)
	}
	before := k.Len()
	allowKeyAt(k, time.Hour+time.Minute, keys[3])
	assert.Equal(t, before+1-2, k.Len())
	assert.Equal(t, 1, k.expire(time.Hour+time.Minute), "ExpireAt drops the third")
	assert.Equal(t, 0, k.expire(time.Hour+time.Minute))
	assert.Equal(t, 1, k.expire(2*time.Hour))
}

func TestKeyedJanitorDropsIdleKeysAndStopsOnClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		k, err := NewKeyed(fixedPer(5, time.Second, nil), WithClock(clk),
			WithIdleTTL(time.Minute), WithJanitor(10*time.Second))
		require.NoError(t, err)
		for i := range 100 {
			require.True(t, allowKey(k, clk.Now(), "key"+strconv.Itoa(i)))
		}
		time.Sleep(30 * time.Second)
		require.True(t, allowKey(k, clk.Now(), "key0"))
		assert.Equal(t, 100, k.Len())
		time.Sleep(41 * time.Second) // the janitor ran at 70s
		synctest.Wait()
		assert.Equal(t, 1, k.Len(), "key0, idle for 40s only, is kept")
		time.Sleep(30 * time.Second)
		synctest.Wait()
		assert.Equal(t, 0, k.Len())
		require.NoError(t, k.Close())
		require.NoError(t, k.Close())
		assert.True(t, allowKey(k, clk.Now(), "after-close"), "a closed Keyed still decides")
	})
}

func TestKeyedNoGoroutineWithoutJanitor(t *testing.T) {
	defer goleak.VerifyNone(t)
	k, err := NewKeyed(fixedPer(5, time.Second, nil), WithIdleTTL(time.Minute))
	require.NoError(t, err)
	assert.True(t, allowKey(k, monoclock.Now(), "a"))
	require.NoError(t, k.Close())
}

func TestKeyedMissingKey(t *testing.T) {
	t.Run("shared by default", func(t *testing.T) {
		k := mustKeyed(t, fixedPer(2, time.Second, nil))
		d1, _ := admit(k, context.Background(), 0)
		d2, _ := admit(k, context.Background(), 0)
		d3, _ := admit(k, context.Background(), 0)
		assert.True(t, d1.Allowed)
		assert.True(t, d2.Allowed)
		assert.False(t, d3.Allowed, "keyless requests share one limiter")
		assert.True(t, allowKeyAt(k, 0, "someone"))
	})
	t.Run("rejected", func(t *testing.T) {
		k := mustKeyed(t, fixedPer(2, time.Second, nil), RequireKey())
		d, tk := admit(k, context.Background(), 0)
		assert.False(t, d.Allowed)
		assert.Zero(t, tk)
		assert.ErrorIs(t, d.Cause, ErrNoKey)
		assert.ErrorIs(t, d.Cause, sluice.ErrRateLimited)
		assert.Equal(t, int64(-1), d.Limit)
		assert.Equal(t, "ratelimit/keyed", d.Policy)
		d, _ = admit(k, keyCtx(""), 0)
		assert.True(t, d.Allowed, "an empty key is a key")
	})
}

func TestKeyedLimiterErrors(t *testing.T) {
	boom := errors.New("boom")
	k := mustKeyed(t, func(key string) (sluice.Policy, error) {
		if key == "bad" {
			return nil, boom
		}
		if key == "nil" {
			return nil, nil
		}
		return NewFixedWindow(1, time.Second)
	})
	for _, key := range []string{"bad", "nil"} {
		d, tk := admit(k, keyCtx(key), 0)
		assert.False(t, d.Allowed)
		assert.Zero(t, tk)
		assert.ErrorIs(t, d.Cause, sluice.ErrRateLimited)
		assert.Positive(t, d.RetryAfter)
		assert.False(t, allowKeyAt(k, 0, key))
	}
	assert.ErrorIs(t, decideKeyAt(k, 0, "bad", 1).Cause, boom)
	assert.Equal(t, 0, k.Len())
}

func TestKeyedValidation(t *testing.T) {
	good := fixedPer(1, time.Second, nil)
	for _, tc := range []struct {
		name string
		f    func(string) (sluice.Policy, error)
		opts []Option
	}{
		{"nil newLimiter", nil, nil},
		{"newLimiter fails", func(string) (sluice.Policy, error) { return NewFixedWindow(0, time.Second) }, nil},
		{"newLimiter returns nil", func(string) (sluice.Policy, error) { return nil, nil }, nil},
		{"zero max keys", good, []Option{WithMaxKeys(0)}},
		{"negative idle TTL", good, []Option{WithIdleTTL(-time.Second)}},
		{"zero janitor interval", good, []Option{WithIdleTTL(time.Second), WithJanitor(0)}},
		{"janitor without idle TTL", good, []Option{WithJanitor(time.Second)}},
		{"empty name", good, []Option{WithName("")}},
		{"nil clock", good, []Option{WithClock(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := NewKeyed(tc.f, tc.opts...)
			require.Error(t, err)
			require.Nil(t, k)
		})
	}
}

// TestKeyedOnlyOptionsRejectedByLimiters gives each option that applies to
// NewKeyed alone to every other constructor: each must fail, naming it.
func TestKeyedOnlyOptionsRejectedByLimiters(t *testing.T) {
	constructors := map[string]func(Option) error{
		"token bucket":   func(o Option) error { _, err := NewTokenBucket(PerSecond(1), 1, o); return err },
		"gcra":           func(o Option) error { _, err := NewGCRA(PerSecond(1), 1, o); return err },
		"leaky bucket":   func(o Option) error { _, err := NewLeakyBucket(PerSecond(1), 1, o); return err },
		"shaper":         func(o Option) error { _, err := NewShaper(PerSecond(1), 0, o); return err },
		"warm-up":        func(o Option) error { _, err := NewWarmUp(PerSecond(10), 10, time.Second, 3, o); return err },
		"fixed window":   func(o Option) error { _, err := NewFixedWindow(1, time.Second, o); return err },
		"sliding window": func(o Option) error { _, err := NewSlidingWindow(1, time.Second, 10, o); return err },
		"sliding log":    func(o Option) error { _, err := NewSlidingLog(1, time.Second, o); return err },
	}
	options := map[string]Option{
		"WithMaxKeys": WithMaxKeys(10), "WithIdleTTL": WithIdleTTL(time.Minute),
		"WithJanitor": WithJanitor(time.Minute), "RequireKey": RequireKey(),
	}
	for cname, build := range constructors {
		require.NoError(t, build(WithName("x")), cname)
		for oname, o := range options {
			err := build(o)
			require.Error(t, err, "%s with %s", cname, oname)
			assert.Contains(t, err.Error(), oname+" applies to NewKeyed only", cname)
		}
	}
}

// SetMaxKeys lowers the cap at once, evicting the least recently used
// keys, raises it for keys to come, and keeps the limiters of the keys it
// holds. A cap under one key a shard is refused, and changes nothing.
func TestKeyedSetMaxKeys(t *testing.T) {
	var made atomic.Int64
	k := mustKeyed(t, fixedPer(1, time.Hour, &made), WithMaxKeys(4))
	keys := sameShard(k, 6)
	for _, key := range keys[:4] {
		require.True(t, allowKeyAt(k, 0, key))
	}
	require.NoError(t, k.SetMaxKeys(2))
	assert.Equal(t, 2, k.Len(), "two evicted")
	assert.False(t, allowKeyAt(k, 0, keys[3]), "the newest keys keep their limiters")
	assert.False(t, allowKeyAt(k, 0, keys[2]))
	require.NoError(t, k.SetMaxKeys(5))
	for _, key := range keys[4:] {
		require.True(t, allowKeyAt(k, 0, key))
	}
	assert.Equal(t, 4, k.Len(), "room for more")
	assert.True(t, allowKeyAt(k, 0, keys[0]), "evicted, keys[0] starts afresh")
	assert.Equal(t, 5, k.Len())
	assert.Equal(t, int64(7), made.Load()-1, "one made at construction, then one a key")

	wide := mustKeyed(t, fixedPer(1, time.Hour, nil), WithMaxKeys(100_000))
	require.Len(t, wide.shards, 64)
	assert.ErrorContains(t, wide.SetMaxKeys(63), "want at least 64")
	assert.ErrorContains(t, wide.SetMaxKeys(0), "want at least 64")
	total := 0
	for i := range wide.shards {
		total += wide.shards[i].cap
	}
	assert.Equal(t, 100_000, total, "unchanged")
	require.NoError(t, wide.SetMaxKeys(1000))
	total = 0
	for i := range wide.shards {
		total += wide.shards[i].cap
	}
	assert.Equal(t, 1000, total, "spread exactly")
}

func TestKeyedSpreadsMaxKeysExactly(t *testing.T) {
	for _, n := range []int{1, 2, 3, 127, 128, 255, 256, 1000, 8191, 8192, 100_000} {
		k := mustKeyed(t, fixedPer(1, time.Second, nil), WithMaxKeys(n))
		total := 0
		require.LessOrEqual(t, len(k.shards), 64)
		for i := range k.shards {
			require.GreaterOrEqual(t, k.shards[i].cap, min(n, 128))
			total += k.shards[i].cap
		}
		assert.Equal(t, n, total, "max keys %d", n)
	}
}

func TestKeyedConformance(t *testing.T) {
	t.Run("keyless", func(t *testing.T) {
		policytest.Run(t, policytest.Config{
			New: func(t *testing.T) sluice.Policy {
				return mustKeyed(t, func(string) (sluice.Policy, error) { return NewSlidingLog(10, 50*ms) })
			},
			Causes: []error{sluice.ErrRateLimited},
		})
	})
	t.Run("keys by instant", func(t *testing.T) {
		policytest.Run(t, policytest.Config{
			New: func(t *testing.T) sluice.Policy {
				k := mustKeyed(t, func(string) (sluice.Policy, error) { return NewLeakyBucket(Every(5*ms), 4) }, WithMaxKeys(3))
				return keyedWith{k, func(now time.Duration) string { return strconv.Itoa(int(now/ms) % 5) }}
			},
			Causes: []error{sluice.ErrRateLimited},
		})
	})
}

func TestKeyedAllocs(t *testing.T) {
	clk := sluice.NewManualClock(0)
	k := mustKeyed(t, fixedPer(1000, time.Second, nil), WithClock(clk))
	ctx := keyCtx("203.0.113.7")
	var now time.Duration
	allocs := testing.AllocsPerRun(1000, func() {
		now += ms
		if d, tk := admit(k, ctx, now); d.Allowed {
			k.Done(tk, sluice.Success, now, 0)
		}
	})
	assert.Zero(t, allocs)
}

func TestKeyedConcurrentNeverOverPerKey(t *testing.T) {
	k := mustKeyed(t, fixedPer(20, 10*ms, nil))
	const keys = 8
	var counts [keys]atomic.Int64
	var clock atomic.Int64
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			for i := range 500 {
				key := (w + i) % keys
				now := time.Duration(clock.Add(int64(20 * time.Microsecond)))
				d, tk := admit(k, keyCtx("k"+strconv.Itoa(key)), now)
				if !d.Allowed {
					continue
				}
				if i%8 == 0 {
					k.Done(tk, sluice.Released, now, 0)
					continue
				}
				counts[key].Add(1)
				k.Done(tk, sluice.Success, now, 0)
			}
		})
	}
	wg.Wait()
	windows := clock.Load()/int64(10*ms) + 1
	for i := range counts {
		assert.LessOrEqual(t, counts[i].Load(), 20*windows, "key %d", i)
		assert.Positive(t, counts[i].Load())
	}
	// No call record is left behind.
	for i := range k.shards {
		s := &k.shards[i]
		free := 0
		for j := s.free.Load(); j >= 0; j = s.call(j).next {
			free++
		}
		assert.Equal(t, int(s.ncalls), free)
	}
}

// TestKeyedFloodKeepsMemoryBounded sends a million distinct keys at a Keyed
// capped at 100,000 and measures the live heap after GC: it stays at what
// the cap holds, not what the flood brought. (A tenth of both under the race
// detector, which makes each key cost twenty times as much.)
func TestKeyedFloodKeepsMemoryBounded(t *testing.T) {
	capKeys, flood := 100_000, 1_000_000
	if raceEnabled {
		capKeys, flood = 10_000, 100_000
	}
	k := mustKeyed(t, fixedPer(10, time.Second, nil), WithMaxKeys(capKeys))
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	key := make([]byte, 0, 16)
	for i := range flood {
		key = strconv.AppendInt(key[:0], int64(i), 10)
		allowKeyAt(k, time.Duration(i), string(key))
		if i == capKeys-1 {
			atCap := heap() - base
			t.Logf("heap held by %d keys: %.1f MB", capKeys, float64(atCap)/1e6)
		}
	}
	after := heap() - base
	t.Logf("heap held after %d distinct keys, capped at %d: %.1f MB (%d bytes a key)",
		flood, capKeys, float64(after)/1e6, after/uint64(capKeys))
	assert.Equal(t, capKeys, k.Len())
	assert.Less(t, after, uint64(capKeys)*640, "a capped Keyed must not hold the flood")
	runtime.KeepAlive(k)
}

func TestKeyedDecideKeyWithAnyPolicy(t *testing.T) {
	var s *spy
	k := mustKeyed(t, func(key string) (sluice.Policy, error) {
		p := &spy{name: key}
		if key == "a" {
			s = p
		}
		return p, nil
	})
	assert.True(t, allowKeyAt(k, 0, "a"))
	d := decideKeyAt(k, 0, "a", 3)
	assert.True(t, d.Allowed)
	assert.Equal(t, "ratelimit/keyed", d.Policy)
	assert.Equal(t, []sluice.Ticket{1, 2}, s.dones, "each decision is told it ended")
}

// TestKeyedKeepsABusyKeyThroughAFlood checks the loose LRU order: a key used
// every few requests survives a flood of new keys, although it moves to the
// front of its list only now and then.
func TestKeyedKeepsABusyKeyThroughAFlood(t *testing.T) {
	var hotMade atomic.Int64
	k := mustKeyed(t, func(key string) (sluice.Policy, error) {
		if key == "hot" {
			hotMade.Add(1)
		}
		return NewFixedWindow(1_000_000, time.Hour)
	}, WithMaxKeys(128))
	require.Len(t, k.shards, 1)
	s := &k.shards[0]
	moves := 0
	for i := range 10_000 {
		if i%10 == 0 {
			before := s.tick
			require.True(t, allowKeyAt(k, 0, "hot"))
			if s.tick != before {
				moves++
			}
		}
		require.True(t, allowKeyAt(k, 0, "cold"+strconv.Itoa(i)))
	}
	assert.Equal(t, int64(1), hotMade.Load(), "the busy key was never evicted")
	assert.Equal(t, 128, k.Len())
	assert.Less(t, moves, 1000/3, "the busy key moved on a few of its uses only")
	t.Logf("the busy key moved to the front on %d of its 1000 uses", moves)
}

func TestKeyedForget(t *testing.T) {
	k := mustKeyed(t, fixedPer(1, time.Hour, nil))
	d, tk := admit(k, keyCtx("mallory"), 0)
	require.True(t, d.Allowed)
	require.False(t, allowKeyAt(k, 0, "mallory"))
	assert.True(t, k.Forget("mallory"))
	assert.False(t, k.Forget("mallory"))
	assert.False(t, k.Forget("nobody"))
	k.Done(tk, sluice.Released, 0, 0) // ends on the forgotten limiter
	assert.True(t, allowKeyAt(k, 0, "mallory"), "a forgotten key starts afresh")
	assert.False(t, allowKeyAt(k, 0, "mallory"))
}

// countingLimiter counts the Admits that allowed and the Dones it hears.
type countingLimiter struct {
	sluice.Policy
	allowed, done *atomic.Int64
}

func (c countingLimiter) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	t, q, cause := c.Policy.Admit(ctx, now)
	if cause == nil {
		c.allowed.Add(1)
	}
	return t, q, cause
}

func (c countingLimiter) Done(t sluice.Ticket, o sluice.Outcome, now, lat time.Duration) {
	c.done.Add(1)
	c.Policy.Done(t, o, now, lat)
}

// TestKeyedConcurrentChurn admits and ends calls over more keys than the
// Keyed holds while idle keys expire and keys are forgotten on another
// goroutine: every Done still reaches the limiter that admitted its call.
func TestKeyedConcurrentChurn(t *testing.T) {
	var allowed, done atomic.Int64
	k := mustKeyed(t, func(string) (sluice.Policy, error) {
		w, err := NewSlidingWindow(5, 10*ms, 5)
		return countingLimiter{w, &allowed, &done}, err
	}, WithMaxKeys(256), WithIdleTTL(2*ms))
	var clock atomic.Int64
	stop := make(chan struct{})
	var sweeper sync.WaitGroup
	sweeper.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k.expire(time.Duration(clock.Load()))
			k.Forget("k" + strconv.Itoa(i%600))
		}
	})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 2000 {
				now := time.Duration(clock.Add(int64(time.Microsecond)))
				ctx := keyCtx("k" + strconv.Itoa((w*7919+i*31)%600))
				d, tk := admit(k, ctx, now)
				if d.Allowed {
					o := sluice.Success
					if i%5 == 0 {
						o = sluice.Released
					}
					k.Done(tk, o, now, 0)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	sweeper.Wait()
	assert.Positive(t, allowed.Load())
	assert.Equal(t, allowed.Load(), done.Load(), "every admitted call's Done reached its limiter")
	assert.LessOrEqual(t, k.Len(), 256)
}

// TestKeyedAllowKey decides by the Keyed's clock: with this package's
// limiters through their bare answer, and with any other policy through its
// Admit, followed at once by a Done reporting a Success.
func TestKeyedAllowKey(t *testing.T) {
	var allowed, done atomic.Int64
	for name, newLimiter := range map[string]func(string) (sluice.Policy, error){
		"this package's limiter": fixedPer(2, time.Second, nil),
		"another policy": func(string) (sluice.Policy, error) {
			w, err := NewFixedWindow(2, time.Second)
			return countingLimiter{w, &allowed, &done}, err
		},
	} {
		t.Run(name, func(t *testing.T) {
			clk := sluice.NewManualClock(0)
			k := mustKeyed(t, newLimiter, WithClock(clk))
			clk.Set(900 * ms)
			assert.True(t, allowKey(k, clk.Now(), "a"))
			assert.True(t, allowKey(k, clk.Now(), "a"))
			assert.False(t, allowKey(k, clk.Now(), "a"), "a's window is full")
			assert.True(t, allowKey(k, clk.Now(), "b"), "b has its own window")
			clk.Set(time.Second)
			assert.True(t, allowKey(k, clk.Now(), "a"), "a new window, by the Keyed's clock")
		})
	}
	assert.Equal(t, int64(4), allowed.Load())
	assert.Equal(t, int64(4), done.Load(), "every admission of AllowKey is ended")
}

// allowKey admits a request of cost 1 with key at now and ends it with
// Success, as a Guard around a call that succeeded would: true when it was
// admitted.
func allowKey(k *Keyed, now time.Duration, key string) bool {
	d, tk := admit(k, keyCtx(key), now)
	if d.Allowed {
		k.Done(tk, sluice.Success, now, 0)
	}
	return d.Allowed
}

// SetMaxKeys evicts the least recently used keys past a lower cap: not a
// busy key that the list, whose order is the uses' only to within a
// quarter of the old cap, left near its tail.
func TestKeyedSetMaxKeysKeepsTheMostRecentlyUsedKey(t *testing.T) {
	k := mustKeyed(t, fixedPer(1, time.Hour, nil), WithMaxKeys(200))
	require.Len(t, k.shards, 1)
	require.True(t, allowKeyAt(k, 0, "hot"))
	// 40 other keys arrive, one at a time, and "hot" is used after each:
	// it stays the most recently used key throughout.
	for i := range 40 {
		require.True(t, allowKeyAt(k, 0, "cold"+string(rune('A'+i))))
		require.False(t, allowKeyAt(k, 0, "hot"), "hot spent its quota")
	}
	require.NoError(t, k.SetMaxKeys(40)) // one key of 41 must go: the least recently used, coldA
	assert.Equal(t, 40, k.Len())
	assert.False(t, allowKeyAt(k, 0, "hot"),
		"the most recently used key was evicted by SetMaxKeys: it starts afresh with a full quota")
}

// A newLimiter that answers a typed nil (a nil *TokenBucket in a
// sluice.Policy) is refused at construction, and a key it answers one for
// is rejected as any key whose limiter could not be made: no panic.
func TestKeyedTypedNilLimiter(t *testing.T) {
	_, err := NewKeyed(func(string) (sluice.Policy, error) {
		var tb *TokenBucket
		return tb, nil
	})
	require.ErrorContains(t, err, "nil policy")
	k, err := NewKeyed(func(key string) (sluice.Policy, error) {
		if key == "bad" {
			var tb *TokenBucket
			return tb, nil
		}
		return NewTokenBucket(PerSecond(1), 1)
	})
	require.NoError(t, err)
	_, q, err := k.Admit(sluice.WithKey(context.Background(), "bad"), time.Second)
	require.ErrorIs(t, err, sluice.ErrRateLimited)
	assert.Equal(t, time.Second, q.RetryAfter)
}

// A long key (a client's header may be a megabyte) is held as a digest:
// the keys' memory is bounded by their number, the key still finds its
// limiter again, Forget finds it, and the limiter's maker sees the key
// itself.
func TestALongKeyIsHeldAsItsDigest(t *testing.T) {
	var made []string
	k, err := NewKeyed(func(key string) (sluice.Policy, error) {
		made = append(made, key)
		return NewGCRA(PerSecond(1), 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 256<<10)
	ctx := sluice.WithKey(context.Background(), long)
	if _, _, err := k.Admit(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.Admit(ctx, 0); err == nil {
		t.Error("the long key's second request found a fresh limiter")
	}
	if len(made) != 2 || made[1] != long { // the probe's "", then the key
		t.Errorf("the limiter's maker saw %d keys, the last of %d bytes", len(made), len(made[len(made)-1]))
	}
	held := 0
	for i := range k.shards {
		for key := range k.shards[i].m {
			held += len(key)
		}
	}
	if held > 17 {
		t.Errorf("the keys held take %d bytes; want the long key's 17-byte digest", held)
	}
	// A short key of a digest's form is no other key's digest.
	fake := k.held(long)
	if k.held(fake) == fake {
		t.Error("a key sent in a digest's form is held as that digest")
	}
	if !k.Forget(long) || k.Len() != 0 {
		t.Error("Forget did not find the long key")
	}
}
