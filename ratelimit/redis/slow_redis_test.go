package redislimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// sentHook signals every command go-redis is about to send.
type sentHook struct{ sent chan struct{} }

func (sentHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h sentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.sent <- struct{}{}
		return next(ctx, cmd)
	}
}
func (sentHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The breaker around Redis "opens after failures consecutive failed
// calls", and a decision waits up to the limiter's timeout for Redis: a
// Redis that stalls for ~35 ms (a fork, a slow command) while every call
// still answers well within a 5 s timeout does not open it, since no call
// failed.
func TestTheRedisBreakerStaysClosedWhileRedisIsMerelySlow(t *testing.T) {
	ms := time.Millisecond
	s := newServer(t)
	c := newClient(t, s.Addr)
	var log eventLog
	l, err := NewGCRA(c, ratelimit.PerSecond(1000), 1000, WithName(uniqueName("stall")),
		WithFailClosed(), WithTimeout(5*time.Second), WithBreaker(5, 10*time.Second),
		WithObserver(log.observe), WithoutCoalescing())
	require.NoError(t, err)
	ctx := sluice.WithKey(context.Background(), "u")

	const start = time.Second      // the Guard's clock
	d, tk := admitD(l, ctx, start) // Redis answers: a success arms the breaker
	require.True(t, d.Allowed)
	l.Done(tk, sluice.Success, start, 0)

	hook := sentHook{sent: make(chan struct{}, 64)}
	c.AddHook(hook)
	require.NoError(t, s.Pause()) // Redis stalls; it will answer every call
	type res struct{ d sluice.Decision }
	results := make(chan res, 64)
	var fallbackAt time.Duration
	for i := 1; i <= 30; i++ {
		now := start + time.Duration(i)*2*ms
		go func() {
			d, tk := admitD(l, ctx, now)
			l.Done(tk, sluice.Success, now, 0)
			results <- res{d}
		}()
		select {
		case <-hook.sent: // went to Redis: on to the next request
		case r := <-results: // decided without Redis
			fallbackAt = now
			require.NoError(t, s.Resume())
			for range i - 1 {
				<-results
			}
			t.Fatalf("at %v into a stall of at least %v, with no failed call, the request was decided by %q (%v); transitions %v, redis errors %d",
				fallbackAt-start, fallbackAt-start, r.d.Policy, r.d.Cause, log.transitions(), log.count(EventRedisError))
		}
	}
	require.NoError(t, s.Resume())
	for range 30 {
		r := <-results
		require.True(t, r.d.Allowed)
		require.Equal(t, l.Name(), r.d.Policy)
	}
	require.Empty(t, log.transitions())
}
