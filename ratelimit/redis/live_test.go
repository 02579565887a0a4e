package redislimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// admitted counts the calls of n through g that were admitted.
func admitted(t *testing.T, g *sluice.Guard, n int) int {
	t.Helper()
	ok := 0
	for range n {
		if g.Do(t.Context(), func(context.Context) error { return nil }) == nil {
			ok++
		}
	}
	return ok
}

func TestSetLimitTakesEffectOnTheNextCall(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	l, err := NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 2, WithName(uniqueName("live")), WithTimeout(time.Second), WithFailClosed())
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(l))
	require.NoError(t, err)
	assert.Equal(t, 2, admitted(t, g, 4), "a burst of 2")
	assert.Equal(t, 2*time.Hour, l.rateWindow())

	// 5 per 5h: the same rate, a burst of 5; the 2 taken stay taken.
	require.NoError(t, l.SetLimit(5, 5*time.Hour))
	assert.Equal(t, 5*time.Hour, l.rateWindow())
	assert.Equal(t, 3, admitted(t, g, 5))
	d := g.Do(t.Context(), func(context.Context) error { return nil })
	dec, ok := sluice.RejectionOf(d)
	require.True(t, ok)
	assert.Equal(t, int64(5), dec.Limit)

	// Bad numbers change nothing.
	require.Error(t, l.SetLimit(0, time.Hour))
	require.Error(t, l.SetLimit(5, 0))
	assert.Equal(t, 5*time.Hour, l.rateWindow())

	other, err := NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 2, WithName(uniqueName("live")))
	require.NoError(t, err)
	all, err := All([]*Limiter{l, other})
	require.NoError(t, err)
	require.Error(t, all.SetLimit(5, time.Hour), "All's limits change on its members")
}

func TestSetLimitOnAWindowKeepsItsCount(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	// A day's window: the test does not straddle its end but at midnight.
	l, err := NewSlidingWindow(c, 3, 24*time.Hour, 4, WithName(uniqueName("live")), WithTimeout(time.Second), WithFailClosed())
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(l))
	require.NoError(t, err)
	assert.Equal(t, 3, admitted(t, g, 5))
	require.NoError(t, l.SetLimit(5, 24*time.Hour))
	assert.Equal(t, 2, admitted(t, g, 5), "the 3 counted stay counted")
	require.Error(t, l.SetLimit(5, 24*time.Hour+time.Microsecond), "4 buckets must divide the window")
}

// TestShadowedRedisLimiterDecidesAsAnEnforcingOne sends the same calls
// through a Guard enforcing a Redis limiter and one shadowing a twin of
// it: the shadowed one rejects nothing and would have rejected as many.
func TestShadowedRedisLimiterDecidesAsAnEnforcingOne(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	mk := func() *Limiter {
		l, err := NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 4, WithName(uniqueName("shadow")), WithTimeout(time.Second), WithFailClosed())
		require.NoError(t, err)
		return l
	}
	le, ls := mk(), mk()
	enforcing, err := sluice.New(sluice.With(le))
	require.NoError(t, err)
	var mu sync.Mutex
	shadowEvents := 0
	shadowed, err := sluice.New(sluice.With(ls), sluice.WithShadow(ls.Name()), sluice.WithObserver(observerFunc(func(e sluice.CallEvent) {
		if e.Shadow {
			mu.Lock()
			shadowEvents++
			mu.Unlock()
		}
	})))
	require.NoError(t, err)

	const calls = 10
	rejected := calls - admitted(t, enforcing, calls)
	assert.Equal(t, 6, rejected)
	assert.Equal(t, calls, admitted(t, shadowed, calls))
	assert.Equal(t, uint64(rejected), shadowed.Stats().Policies[0].ShadowRejected)
	assert.Equal(t, rejected, shadowEvents)

	// Enforcing again, it rejects: what it let through in shadow mode
	// took nothing beyond what enforcement would have.
	require.NoError(t, shadowed.SetShadow(ls.Name(), false))
	assert.Zero(t, admitted(t, shadowed, 1))
}

// observerFunc is an Observer that tells fn of each call.
type observerFunc func(sluice.CallEvent)

func (f observerFunc) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return func(_ context.Context, e sluice.CallEvent) { f(e) }, nil, nil
}

// A window's state in Redis is counted in its length: a window limiter
// refuses a new length, and keeps deciding as before; the same length
// with a new limit is taken.
func TestSetLimitRefusesANewWindowLength(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	mk := map[string]func(...Option) (*Limiter, error){
		"fixed":    func(o ...Option) (*Limiter, error) { return NewFixedWindow(c, 2, time.Hour, o...) },
		"weighted": func(o ...Option) (*Limiter, error) { return NewSlidingWindowWeighted(c, 2, time.Hour, o...) },
		"ring":     func(o ...Option) (*Limiter, error) { return NewSlidingWindow(c, 2, time.Hour, 2, o...) },
	}
	for name, m := range mk {
		t.Run(name, func(t *testing.T) {
			l, err := m(WithName(uniqueName("live")), WithTimeout(time.Second), WithFailClosed())
			require.NoError(t, err)
			g, err := sluice.New(sluice.With(l))
			require.NoError(t, err)
			assert.Equal(t, 1, admitted(t, g, 1))
			assert.ErrorContains(t, l.SetLimit(2, 2*time.Hour), "cannot change a window's length")
			assert.Equal(t, time.Hour, l.rateWindow())
			require.NoError(t, l.SetLimit(3, time.Hour))
			assert.Equal(t, 2, admitted(t, g, 3), "the one counted stays counted")
		})
	}
}

// A fleet shares a GCRA limit of 10/s (burst 10), raised live to 20/s:
// instance A, running, is given the change with SetLimit; instance B,
// started after it, is built with the new numbers. They share one limit of
// 20, not 20 each: a GCRA's keys carry no rate.
func TestSetLimitAndAFreshInstanceShareOneLimit(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	name := uniqueName("fleet")
	a, err := NewGCRA(c, ratelimit.Rate{Count: 10, Period: time.Second}, 10, WithName(name), WithTimeout(time.Second), WithFailClosed())
	require.NoError(t, err)
	require.NoError(t, a.SetLimit(20, time.Second))
	b, err := NewGCRA(c, ratelimit.Rate{Count: 20, Period: time.Second}, 20, WithName(name), WithTimeout(time.Second), WithFailClosed())
	require.NoError(t, err)

	ctx := sluice.WithKey(context.Background(), "user")
	admitted := 0
	for i := range 40 {
		p := a
		if i%2 == 1 {
			p = b
		}
		if d, _ := p.admit(ctx, time.Hour); d.Allowed {
			admitted++
		}
	}
	require.LessOrEqual(t, admitted, 21, "the fleet's shared burst is 20 (one more may refill while the test runs); keys %q and %q", a.limits[0].keyPre, b.limits[0].keyPre)
}

// An All's remembered rejection holds only under the numbers it was
// decided under: a member's SetLimit that raises its limit lets the next
// request through to Redis, which admits it.
func TestAllsNegativeCacheFollowsAMembersSetLimit(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	const window = 240 * time.Hour
	one, err := NewFixedWindow(c, 1, window, WithName(uniqueName("neg-one")))
	require.NoError(t, err)
	wide, err := NewFixedWindow(c, 100, window, WithName(uniqueName("neg-wide")))
	require.NoError(t, err)
	all, err := All([]*Limiter{one, wide}, WithName(uniqueName("neg-all")), WithTimeout(time.Second), WithNegativeCache(16))
	require.NoError(t, err)
	ctx := sluice.WithKey(context.Background(), "user")

	d, _ := all.admit(ctx, time.Hour)
	require.True(t, d.Allowed)
	d, _ = all.admit(ctx, time.Hour+time.Millisecond)
	require.False(t, d.Allowed, "the limit of 1 is spent")

	require.NoError(t, one.SetLimit(10, window)) // same window, 10 per window
	// Redis holds a count of 1 against a limit of 10 now: the member admits.
	d, _ = all.admit(ctx, time.Hour+2*time.Millisecond)
	require.True(t, d.Allowed, "after the member's SetLimit(10), All still rejects from its negative cache: %+v", d)
}

// A Redis token bucket's SetLimit keeps what the bucket lacks, as its
// local twin's does and as a GCRA's does: an empty bucket of 2 raised to 5
// at the same rate admits 3.
func TestTokenBucketSetLimitKeepsWhatItLacks(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	ctx := sluice.WithKey(context.Background(), "user")
	run := func(p sluice.Policy, set func() error) (int, sluice.Decision) {
		for range 2 {
			d, _ := admitD(p, ctx, time.Hour)
			require.True(t, d.Allowed)
		}
		require.NoError(t, set())
		n := 0
		var last sluice.Decision
		for range 5 {
			d, _ := admitD(p, ctx, time.Hour)
			if d.Allowed {
				n++
			}
			last = d
		}
		return n, last
	}
	local, err := ratelimit.NewTokenBucket(ratelimit.Rate{Count: 1, Period: time.Hour}, 2)
	require.NoError(t, err)
	nLocal, _ := run(local, func() error { return local.SetLimit(ratelimit.Rate{Count: 1, Period: time.Hour}, 5) })
	gcra, err := NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 2, WithName(uniqueName("tb-gcra")), WithTimeout(time.Second), WithFailClosed())
	require.NoError(t, err)
	nGCRA, _ := run(gcra, func() error { return gcra.SetLimit(5, 5*time.Hour) })
	tb, err := NewTokenBucket(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 2, WithName(uniqueName("tb")), WithTimeout(time.Second), WithFailClosed())
	require.NoError(t, err)
	nTB, last := run(tb, func() error { return tb.SetLimit(5, 5*time.Hour) })
	t.Logf("admitted after SetLimit(5, 5h): local token bucket %d, redis GCRA %d, redis token bucket %d (last %+v)", nLocal, nGCRA, nTB, last)
	require.Equal(t, nLocal, nTB, "the Redis token bucket must keep what it lacks, as its local twin and the GCRA do")
}
