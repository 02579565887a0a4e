package redislimit

import (
	"context"
	"hash/maphash"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/policywindow"
	"github.com/sluice-go/sluice/ratelimit"
)

// TestDeadlineEpochs pins the shared call deadlines: calls within one grain
// share an epoch, its deadline is the timeout after the epoch starts, and its
// Done closes then.
func TestDeadlineEpochs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEpochs(160 * time.Millisecond) // grain 10ms
		start := time.Now()
		first := e.get()
		assert.Equal(t, start.Add(160*time.Millisecond), first.deadline)
		time.Sleep(9 * time.Millisecond)
		assert.Same(t, first, e.get(), "a call within the grain shares the epoch")
		time.Sleep(time.Millisecond)
		second := e.get()
		assert.NotSame(t, first, second)
		ctx := &callCtx{parent: context.WithValue(context.Background(), ctxKey{}, "v"), ep: first}
		dl, ok := ctx.Deadline()
		assert.True(t, ok)
		assert.Equal(t, first.deadline, dl)
		assert.Equal(t, "v", ctx.Value(ctxKey{}))
		assert.NoError(t, ctx.Err())
		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		select {
		case <-ctx.Done():
		default:
			t.Fatal("Done not closed at the deadline")
		}
		assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
		assert.NoError(t, (&callCtx{parent: context.Background(), ep: second}).Err())
		time.Sleep(time.Second)
	})
}

type ctxKey struct{}

// TestBreakerStates walks the breaker around Redis through its states at
// fixed instants: three failures in a row open it, for one second, then one
// probe decides.
func TestBreakerStates(t *testing.T) {
	b, err := newRedisBreaker(3, time.Second)
	require.NoError(t, err)
	ms := time.Millisecond
	call := func(now time.Duration, ok bool) {
		t.Helper()
		tk, admitted := b.acquire(now)
		require.True(t, admitted, "at %v", now)
		if ok {
			b.success(tk, now)
		} else {
			b.failure(tk, now)
		}
	}
	call(0, true)
	call(10*ms, false)
	call(20*ms, false)
	call(25*ms, true) // a success resets the count
	call(30*ms, false)
	call(40*ms, false)
	assert.Equal(t, breaker.StateClosed, b.b.State())
	call(50*ms, false)
	assert.Equal(t, breaker.StateOpen, b.b.State(), "the third failure in a row opens it")

	_, ok := b.acquire(500 * ms)
	assert.False(t, ok, "open: no call to Redis")
	assert.Equal(t, 550*ms, b.openLeft(500*ms))
	probe, ok := b.acquire(1050 * ms)
	require.True(t, ok, "after the open time, one probe")
	_, ok = b.acquire(1051 * ms)
	assert.False(t, ok, "half-open: one probe at a time")
	b.failure(probe, 1100*ms)
	assert.Equal(t, breaker.StateOpen, b.b.State(), "a failed probe opens it again")
	_, ok = b.acquire(2000 * ms)
	assert.False(t, ok)
	probe, ok = b.acquire(2100 * ms)
	require.True(t, ok)
	b.success(probe, 2100*ms)
	assert.Equal(t, breaker.StateClosed, b.b.State(), "a successful probe closes it")
	assert.Equal(t, time.Second, b.openLeft(2101*ms), "closed: the whole open time")
}

// TestNegativeCacheBounds pins that the cache holds at most its capacity,
// making room by dropping expired entries.
func TestNegativeCacheBounds(t *testing.T) {
	c := &negCache{m: make(map[string]negEntry), max: 2, seed: maphash.MakeSeed()}
	n := &limitNums{periodArg: "1000", quotaArg: "10"}
	rej := func(retry time.Duration) sluice.Decision { return sluice.Decision{RetryAfter: retry, Reset: retry} }
	put := func(key string, now time.Duration, d sluice.Decision) { c.put(key, now, d, n.periodArg, n.quotaArg, 0) }
	put("a", 0, rej(time.Second))
	put("b", 0, rej(2*time.Second))
	put("c", 0, rej(time.Second)) // full, nothing expired: not cached
	_, ok := c.get("c", 0, n)
	assert.False(t, ok)
	d, ok := c.get("a", 400*time.Millisecond, n)
	require.True(t, ok)
	assert.Equal(t, 600*time.Millisecond, d.RetryAfter)
	put("c", 1500*time.Millisecond, rej(time.Second)) // "a" has expired: room
	_, ok = c.get("c", 1500*time.Millisecond, n)
	assert.True(t, ok)
	_, ok = c.get("b", 2*time.Second, n)
	assert.False(t, ok, "expired at its RetryAfter")
	_, ok = c.get("c", 1600*time.Millisecond, &limitNums{periodArg: "1000", quotaArg: "20"})
	assert.False(t, ok, "decided under other numbers")
}

// An All built over long-lived limiters, and dropped, is collected: the
// first limiter's breaker, which it shares, does not keep it.
func TestDroppedAllIsCollected(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	a, err := NewGCRA(client, ratelimit.PerSecond(10), 10, WithName("a"))
	require.NoError(t, err)
	b, err := NewFixedWindow(client, 10, time.Second, WithName("b"))
	require.NoError(t, err)
	var collected atomic.Int32
	for range 3 {
		all, err := All([]*Limiter{a, b})
		require.NoError(t, err)
		runtime.AddCleanup(all, func(n *atomic.Int32) { n.Add(1) }, &collected)
	}
	for i := 0; i < 100 && collected.Load() < 3; i++ {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	assert.EqualValues(t, 3, collected.Load(), "dropped All limiters collected")
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}

// A nil subscriber is ignored: the breaker's next change reaches the others.
func TestSubscribeNilIsIgnored(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	l, err := NewGCRA(client, ratelimit.PerSecond(10), 10)
	require.NoError(t, err)
	l.Subscribe(nil)()
	l.Subscribe(nil)
	var heard []string
	l.Subscribe(func(c sluice.StateChange) { heard = append(heard, c.To) })
	l.br.b.ForceOpen()
	assert.Equal(t, []string{"open"}, heard)
}

// Window is what the local twins report: a bucket's time to refill its
// burst, a window's length; for All, the window its limits share.
func TestWindow(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	g, err := NewGCRA(client, ratelimit.PerSecond(10), 20, WithName("g"))
	require.NoError(t, err)
	tb, err := NewTokenBucket(client, ratelimit.Rate{Count: 6, Period: time.Minute}, 6, WithName("t"))
	require.NoError(t, err)
	f, err := NewFixedWindow(client, 6, time.Minute, WithName("f"))
	require.NoError(t, err)
	s, err := NewSlidingWindowWeighted(client, 100, time.Second, WithName("s"))
	require.NoError(t, err)
	local, err := ratelimit.NewGCRA(ratelimit.PerSecond(10), 20)
	require.NoError(t, err)
	assert.Equal(t, policywindow.Of(local), policywindow.Of(g))
	assert.Equal(t, 2*time.Second, policywindow.Of(g))
	assert.Equal(t, time.Minute, policywindow.Of(tb))
	assert.Equal(t, time.Minute, policywindow.Of(f))
	assert.Equal(t, time.Second, policywindow.Of(s))
	same, err := All([]*Limiter{tb, f})
	require.NoError(t, err)
	assert.Equal(t, time.Minute, policywindow.Of(same))
	mixed, err := All([]*Limiter{g, f})
	require.NoError(t, err)
	assert.Zero(t, policywindow.Of(mixed), "which limit decided is unknown")
}

// A reply is five integers per limit and nothing else: a number past
// int64's range is not read wrapped around, and a number run into other
// text or more numbers than the limits' make the reply malformed.
func TestParseReplyRefusesMalformedNumbers(t *testing.T) {
	ds, marks := make([]sluice.Decision, 1), make([]int64, 1)
	for _, s := range []string{
		"1 18446744073709551617 3 4 5", // 2^64 + 1: would read as Remaining 1
		"0 0 0 99999999999999999999 5",
		"1 2 3 4 5x",
		"1 2 3 4 5 6",
		"1-2 3 4 5",
	} {
		assert.ErrorIs(t, parseReply(s, ds, marks), errReply, s)
	}
	require.NoError(t, parseReply(" 1 9 100000 0 1700000000000000 ", ds, marks))
	assert.Equal(t, sluice.Decision{Allowed: true, Remaining: 9, Reset: 100 * time.Millisecond}, ds[0])
	assert.EqualValues(t, 1700000000000000, marks[0])
}
