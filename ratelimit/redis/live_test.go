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
