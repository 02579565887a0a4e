package redislimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// refundGate blocks the first refund script call (ARGV[1] "r") until
// release is closed, telling started when it is held.
type refundGate struct {
	started, release chan struct{}
	held             bool
}

func (h *refundGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *refundGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *refundGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 4 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && a[4] == "r" && !h.held {
			h.held = true
			close(h.started)
			<-h.release
		}
		return next(ctx, cmd)
	}
}

// A cost-1 request rejected by Redis while a release's refund is on its way
// (the quota not yet given back) is not remembered once the refund has
// landed: the key is Redis's to decide again, not turned away locally for
// the whole RetryAfter while Redis has room.
func TestTheNegativeCacheForgetsOnlyOnceTheRefundLanded(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	loadScripts(t, c)
	_ = decideScript.Run(context.Background(), c, []string{"zz:review:load"}, "r", "f", "1000000", "1", "1", "0").Err()
	gate := &refundGate{started: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(gate)
	window := windowWithRoom(10*time.Hour, time.Hour)
	l, err := NewFixedWindow(c, 1, window, WithName(uniqueName("zz-neg")), WithNegativeCache(16),
		WithTimeout(10*time.Second), WithoutCoalescing())
	require.NoError(t, err)
	ctx := sluice.WithKey(context.Background(), "k")
	const at = time.Hour

	d, tk := l.admit(ctx, at)
	require.True(t, d.Allowed, "%+v", d)
	done := make(chan struct{})
	go func() { l.Done(tk, sluice.Released, at, 0); close(done) }()
	<-gate.started // forgotten, the refund held

	d, _ = l.admit(ctx, at) // Redis still counts the first: rejected, remembered
	require.False(t, d.Allowed, "%+v", d)
	close(gate.release)
	<-done // the unit is back in Redis

	d, tk = l.admit(ctx, at)
	require.True(t, d.Allowed, "after the refund Redis has room, yet the negative cache answered: %+v", d)
	l.Done(tk, sluice.Success, at, 0)
}

// All: a request costing more than limit A's quota but within B's, while B
// is spent with a longer wait, is answered with A's numbers, the limit that
// can never admit it, not B's (10, which the cost 5 fits).
func TestAllReportsTheLimitANeverSatisfiableRequestExceeds(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	a, err := NewGCRA(c, ratelimit.PerSecond(3), 3, WithName(uniqueName("zz-a")))
	require.NoError(t, err)
	window := windowWithRoom(10*time.Hour, time.Hour)
	b, err := NewFixedWindow(c, 10, window, WithName(uniqueName("zz-b")))
	require.NoError(t, err)
	all, err := All([]*Limiter{a, b})
	require.NoError(t, err)
	ctx := sluice.WithKey(context.Background(), "k")
	const at = time.Hour

	d, tk := b.admit(sluice.WithCost(ctx, 10), at) // B spent, for up to its window
	require.True(t, d.Allowed, "%+v", d)
	b.Done(tk, sluice.Success, at, 0)

	d, _ = all.admit(sluice.WithCost(ctx, 5), at)
	require.False(t, d.Allowed)
	require.True(t, errors.Is(d.Cause, ratelimit.ErrNeverSatisfiable), "%+v", d)
	require.EqualValues(t, 3, d.Limit, "never satisfiable under A (quota 3), reported with B's numbers: %+v", d)
	require.EqualValues(t, 3, d.Remaining, "A's quota is untouched: %+v", d)
}

// Redis unreachable: a request costing more than the quota is answered
// with the limit's quota and name, not the failure policy's decision
// (Limit -1 and the policy ":open"/":closed", or the local share's part of
// the limit).
func TestANeverSatisfiableRequestWhileRedisIsDownReportsTheQuota(t *testing.T) {
	c := newClient(t, "127.0.0.1:1") // nothing listens: refused at once
	for name, opt := range map[string]Option{"open": WithFailOpen(), "closed": WithFailClosed(), "local": WithLocalFallback(2)} {
		t.Run(name, func(t *testing.T) {
			n := uniqueName("zz-down")
			l, err := NewGCRA(c, ratelimit.PerSecond(10), 10, WithName(n), opt, WithTimeout(time.Second))
			require.NoError(t, err)
			ctx := sluice.WithCost(sluice.WithKey(context.Background(), "k"), 11)
			d, tk := l.admit(ctx, time.Hour)
			require.Zero(t, tk)
			require.False(t, d.Allowed)
			require.True(t, errors.Is(d.Cause, ratelimit.ErrNeverSatisfiable), "%+v", d)
			require.EqualValues(t, 10, d.Limit, "the limit's quota: %+v", d)
			require.Equal(t, n, d.Policy, "%+v", d)
		})
	}
}
