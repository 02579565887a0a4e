package redislimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/ratelimit"
)

// batchTimeoutHook holds single-request script calls until gate closes, and holds a
// batch call (more than one cost) until its context is done and until
// release is closed, then fails it as a timeout.
type batchTimeoutHook struct {
	gate, release chan struct{}
}

func (batchTimeoutHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h batchTimeoutHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) > 0 && (args[0] == "evalsha" || args[0] == "eval") {
			if len(args) <= 7 { // one key, period, quota, cost
				<-h.gate
			} else {
				<-ctx.Done()
				<-h.release
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}
func (batchTimeoutHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func laneState(l *Limiter, key string) (flights, queued int) {
	for i := range l.lanes {
		sh := &l.lanes[i]
		sh.mu.Lock()
		if ln := sh.m[key]; ln != nil {
			flights, queued = ln.flights, len(ln.q)
		}
		sh.mu.Unlock()
	}
	return
}

// One lost batch call is one failure, as one lost call of a request alone
// is: a batch call that times out counts once for the breaker around
// Redis, not once per request it carried (one slow batch opened it).
func TestOneLostBatchCallIsOneBreakerFailure(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	h := batchTimeoutHook{gate: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(h)
	var queueTimeouts atomic.Int64
	l, err := NewGCRA(c, ratelimit.PerSecond(1000), 1000, WithName(uniqueName("batchfail")),
		WithTimeout(300*time.Millisecond), WithBreaker(5, time.Hour),
		WithObserver(func(e Event) {
			if e.Kind == EventRedisError && errors.Is(e.Err, errQueueTimeout) {
				queueTimeouts.Add(1)
			}
		}))
	require.NoError(t, err)
	ctx := sluice.WithKey(context.Background(), "hot")
	key, _ := l.limits[0].key(ctx)

	var wg sync.WaitGroup
	admit := func() {
		defer wg.Done()
		d, tk := l.admit(ctx, time.Second)
		if tk != 0 {
			l.Done(tk, sluice.Success, time.Second, 0)
		}
		_ = d
	}
	for range maxFlights {
		wg.Add(1)
		go admit()
	}
	for i := 0; ; i++ {
		if f, _ := laneState(l, key); f == maxFlights {
			break
		}
		require.Less(t, i, 5000)
		time.Sleep(time.Millisecond)
	}
	const queued = 20
	for range queued {
		wg.Add(1)
		go admit()
	}
	for i := 0; ; i++ {
		if _, q := laneState(l, key); q == queued {
			break
		}
		require.Less(t, i, 5000)
		time.Sleep(time.Millisecond)
	}
	close(h.gate) // the 8 single calls answer; the 20 go as one batch call
	// Wait until the batch's other requests have given up, then let the
	// batch call fail.
	for i := 0; queueTimeouts.Load() < queued-1 && i < 3000; i++ {
		time.Sleep(time.Millisecond)
	}
	close(h.release)
	wg.Wait()
	t.Logf("queue timeouts reported: %d", queueTimeouts.Load())
	require.Equal(t, breaker.StateClosed, l.br.b.State(),
		"one batch call timed out: one failure, the breaker (5 failures) must stay closed")
}
