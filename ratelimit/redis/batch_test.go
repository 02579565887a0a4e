package redislimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// pipeCounter counts the pipelines of script calls a client sends, and the
// calls in them.
type pipeCounter struct{ pipes, cmds atomic.Int64 }

func (h *pipeCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "evalsha" {
			h.pipes.Add(1)
			h.cmds.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

// A lone caller sends each decision by itself; concurrent callers share
// round trips, and each decision still counts once: the limit admits exactly
// its quota.
func TestConcurrentDecisionsShareRoundTrips(t *testing.T) {
	s := newServer(t)
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			c := newClient(t, s.Addr)
			var h pipeCounter
			c.AddHook(&h)
			l, err := alg.make(c, 300, 3600_000_000_000, WithName(uniqueName(alg.name)))
			require.NoError(t, err)
			ctx := sluice.WithKey(context.Background(), "user")

			for range 20 {
				d, tk := l.Admit(ctx, sluice.Now())
				require.True(t, d.Allowed)
				l.Done(tk, sluice.Success, sluice.Now(), 0)
			}
			require.Zero(t, h.pipes.Load(), "a lone caller's decisions went in a pipeline")

			var admitted, byRedis atomic.Int64
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for range 40 {
						d, tk := l.Admit(ctx, sluice.Now())
						if d.Policy == l.Name() {
							byRedis.Add(1)
						}
						if d.Allowed {
							admitted.Add(1)
							l.Done(tk, sluice.Success, sluice.Now(), 0)
						}
					}
				})
			}
			wg.Wait()
			assert.EqualValues(t, 16*40, byRedis.Load())
			assert.EqualValues(t, 300-20, admitted.Load())
			assert.Positive(t, h.pipes.Load(), "16 concurrent callers never shared a round trip")
			if p := h.pipes.Load(); p > 0 {
				t.Logf("%d pipelines, %.1f decisions each", p, float64(h.cmds.Load())/float64(p))
			}
		})
	}
}

// A batch in which some decisions fail (their key holds another type)
// answers the others. (The breaker around Redis is set not to open on those
// failures, which would send the good key's decisions to the failure policy
// too.)
func TestBatchAnswersEachCallAlone(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	l, err := NewGCRA(c, ratelimit.PerHour(1000), 1000, WithName(uniqueName("each")), WithFailClosed(),
		WithBreaker(1000, time.Second),
		WithKeyFunc(func(ctx context.Context) string { k, _ := sluice.KeyFrom(ctx); return k }))
	require.NoError(t, err)
	bad := sluice.WithKey(context.Background(), "bad")
	key, _ := l.limits[0].key(bad)
	require.NoError(t, c.HSet(context.Background(), key, "x", 1).Err())
	require.NoError(t, c.PExpire(context.Background(), key, time.Minute).Err())

	var good, failed atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			ctx := sluice.WithKey(context.Background(), "good")
			if i%2 == 0 {
				ctx = bad
			}
			for range 30 {
				d, tk := l.Admit(ctx, sluice.Now())
				switch {
				case d.Allowed && d.Policy == l.Name():
					good.Add(1)
					l.Done(tk, sluice.Success, sluice.Now(), 0)
				case !d.Allowed:
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, 4*30, good.Load(), "the good key's decisions")
	assert.EqualValues(t, 4*30, failed.Load(), "the bad key's decisions")
}
