package redislimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/ratelimit"
)

// These tests run on Redis's own clock, so they sleep: the intervals are
// long enough that a stall of the machine would have to last most of one to
// turn a rejection the test expects into an admission.

// A release long after its admission gives back only the cost less what
// came back since, as the local twins do: GCRA and the token bucket of
// burst 1 must not let a second request through within one interval of B.
func TestLateReleaseGivesBackNoOtherRequestsCharge(t *testing.T) {
	const iv = 600 * time.Millisecond
	s := newServer(t)
	c := newClient(t, s.Addr)
	for _, alg := range algorithms[:2] { // gcra, token-bucket
		t.Run(alg.name, func(t *testing.T) {
			l, err := alg.make(c, 1, iv, WithName(uniqueName(alg.name)), WithTimeout(time.Second))
			require.NoError(t, err)
			ctx := sluice.WithKey(context.Background(), "alice")
			startA := monoclock.Now()
			a, ta := admitD(l, ctx, startA)
			require.True(t, a.Allowed)
			time.Sleep(iv + 100*time.Millisecond) // a token came back
			b, tb := admitD(l, ctx, monoclock.Now())
			require.True(t, b.Allowed, "%+v", b)
			// A's token came back already.
			d := releaseThenAdmit(ctx, l, ta, tb, monoclock.Now()-startA)
			require.False(t, d.Allowed, "burst 1, a second request within one interval of B: %+v", d)
		})
	}
}

// A release at once gives the whole cost back, as before.
func TestReleaseAtOnceGivesTheCostBack(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			l, err := alg.make(c, 1, time.Hour, WithName(uniqueName(alg.name)), WithTimeout(time.Second))
			require.NoError(t, err)
			ctx := sluice.WithKey(context.Background(), "bob")
			for range 3 {
				at := monoclock.Now()
				d, tk := admitD(l, ctx, at)
				require.True(t, d.Allowed, "%+v", d)
				now := monoclock.Now()
				l.Done(tk, sluice.Released, now, now-at)
			}
		})
	}
}

// A request counted in one fixed window and released after it turned gives
// nothing back: the local twin's window has moved on too, and the count now
// current is another request's.
func TestFixedWindowReleaseAfterTheTurnGivesNothingBack(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	const window = 600 * time.Millisecond
	l, err := NewFixedWindow(c, 1, window, WithName(uniqueName("fw-refund")), WithTimeout(time.Second))
	require.NoError(t, err)
	ctx := sluice.WithKey(context.Background(), "alice")
	ta, tb := acrossTheTurn(t, ctx, l, func(a sluice.Decision) time.Duration { return a.Reset })
	d := releaseThenAdmit(ctx, l, ta, tb, 0)
	require.False(t, d.Allowed, "a second admission in B's window: %+v", d)
}

// A sliding window request released after the window turned is taken off
// the previous window's count, where it was counted, not off the current
// one, which holds another request.
func TestSlidingWindowReleaseAfterTheTurnGivesBackToThePreviousWindow(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	const window = 600 * time.Millisecond
	l, err := NewSlidingWindowWeighted(c, 2, window, WithName(uniqueName("sw-refund")), WithTimeout(time.Second))
	require.NoError(t, err)
	ctx := sluice.WithKey(context.Background(), "alice")
	key, _ := l.limits[0].key(ctx)
	ta, tb := acrossTheTurn(t, ctx, l, func(a sluice.Decision) time.Duration { return a.Reset - window })
	l.Done(tb, sluice.Success, monoclock.Now(), 0)
	l.Done(ta, sluice.Released, monoclock.Now(), 0)
	state, err := c.HMGet(context.Background(), key, "c", "p").Result()
	require.NoError(t, err)
	require.Equal(t, []any{"1", "0"}, state, "B still counted in the current window, A gone from the previous")
}

// When Redis's clock lags the stored state (a failover to a host whose
// clock is behind), a token bucket's refill and a sliding window start
// later: RetryAfter includes the lag, so a retry after it is admitted.
func TestRetryAfterIncludesTheClockLag(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	const iv = 200 * time.Millisecond
	ctx := sluice.WithKey(context.Background(), "alice")
	tb, err := NewTokenBucket(c, rateOf(iv), 1, WithName(uniqueName("tb-ahead")), WithTimeout(time.Second))
	require.NoError(t, err)
	sw, err := NewSlidingWindowWeighted(c, 2, iv, WithName(uniqueName("sw-ahead")), WithTimeout(time.Second))
	require.NoError(t, err)
	for _, tc := range []struct {
		l     *Limiter
		state func(redisNow int64) []any
	}{
		// Empty (lacking its burst of 1), its last refill 600ms ahead of
		// Redis's clock.
		{tb, func(now int64) []any { return []any{"k", 1, "l", now + 600_000} }},
		// Full, its window two windows ahead of Redis's clock.
		{sw, func(now int64) []any { return []any{"w", now/iv.Microseconds() + 2, "c", 2, "p", 0} }},
	} {
		l := tc.l
		key, _ := l.limits[0].key(ctx)
		tm, err := c.Time(ctx).Result()
		require.NoError(t, err)
		require.NoError(t, c.HSet(ctx, key, tc.state(tm.UnixMicro())...).Err())
		require.NoError(t, c.PExpire(ctx, key, 5*time.Second).Err())
		d, _ := admitD(l, ctx, monoclock.Now())
		require.False(t, d.Allowed, "%s: %+v", l.Name(), d)
		require.Greater(t, d.RetryAfter, 300*time.Millisecond, "%s: the lag is part of the wait", l.Name())
		time.Sleep(d.RetryAfter + 10*time.Millisecond)
		d2, tk := admitD(l, ctx, monoclock.Now())
		if d2.Allowed {
			l.Done(tk, sluice.Success, monoclock.Now(), 0)
		}
		require.True(t, d2.Allowed, "%s: rejected with RetryAfter %v, then again after it: %+v", l.Name(), d.RetryAfter, d2)
	}
}

// Limiters whose prefix and name split the same string differently keep
// their own state: a ':' in a name is escaped in the keys.
func TestPrefixAndNameDoNotRunTogether(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	a, err := NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 1, WithPrefix("sluice:billing"), WithName("login"))
	require.NoError(t, err)
	b, err := NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 1, WithPrefix("sluice"), WithName("billing:login"))
	require.NoError(t, err)
	ctx := sluice.WithKey(context.Background(), "alice")
	d, _ := admitD(a, ctx, monoclock.Now())
	require.True(t, d.Allowed)
	d, _ = admitD(b, ctx, monoclock.Now())
	require.True(t, d.Allowed, "%q charged by %q: %+v", b.Name(), a.Name(), d)
}

// releaseThenAdmit releases request a, latency after its admission, then
// decides a third request while b still holds its quota, and returns that
// decision.
func releaseThenAdmit(ctx context.Context, l *Limiter, a, b sluice.Ticket, latency time.Duration) sluice.Decision {
	l.Done(a, sluice.Released, monoclock.Now(), latency)
	d, tc := admitD(l, ctx, monoclock.Now())
	if d.Allowed {
		l.Done(tc, sluice.Success, monoclock.Now(), 0)
	}
	l.Done(b, sluice.Success, monoclock.Now(), 0)
	return d
}

// acrossTheTurn admits request A, waits untilNext(A's decision) and a little
// more, into the next window, and admits request B there.
func acrossTheTurn(t *testing.T, ctx context.Context, l *Limiter, untilNext func(sluice.Decision) time.Duration) (a, b sluice.Ticket) {
	t.Helper()
	ad, a := admitD(l, ctx, monoclock.Now())
	require.True(t, ad.Allowed)
	time.Sleep(untilNext(ad) + 20*time.Millisecond)
	bd, b := admitD(l, ctx, monoclock.Now())
	require.True(t, bd.Allowed, "%+v", bd)
	return a, b
}
