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
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/ratelimit"
)

// TestAccuracy runs 4 instances (separate clients, so separate connection
// pools) × 16 goroutines on one key for 2 s: the instances together admit no
// more than burst + elapsed × rate, elapsed running until the last call has
// ended, and at least 95% of burst + offered × rate, offered being the time
// the goroutines kept asking (calls in flight when they stop may still be
// admitted, but none is asked for after).
func TestAccuracy(t *testing.T) {
	s := newServer(t)
	const (
		instances  = 4
		goroutines = 16
		run        = 2 * time.Second
		burst      = 100
	)
	rate := ratelimit.PerSecond(400)
	for _, alg := range []struct {
		name string
		make func(c redis.UniversalClient, name string) (*Limiter, error)
	}{
		{"gcra", func(c redis.UniversalClient, name string) (*Limiter, error) {
			return NewGCRA(c, rate, burst, WithName(name), WithTimeout(time.Second), WithFailClosed())
		}},
		{"token-bucket", func(c redis.UniversalClient, name string) (*Limiter, error) {
			return NewTokenBucket(c, rate, burst, WithName(name), WithTimeout(time.Second), WithFailClosed())
		}},
	} {
		t.Run(alg.name, func(t *testing.T) {
			name := uniqueName(alg.name)
			var admitted, fallbacks atomic.Int64
			var wg sync.WaitGroup
			ctx := sluice.WithKey(context.Background(), "shared")
			stop := make(chan struct{})
			var ls []*Limiter
			for range instances {
				c := newClient(t, s.Addr)
				require.NoError(t, c.Ping(ctx).Err())
				l, err := alg.make(c, name)
				require.NoError(t, err)
				ls = append(ls, l)
			}
			start := time.Now()
			for _, l := range ls {
				for range goroutines {
					wg.Go(func() {
						for {
							select {
							case <-stop:
								return
							default:
							}
							d, tk := admitD(l, ctx, monoclock.Now())
							if d.Policy != name {
								fallbacks.Add(1)
							}
							if d.Allowed {
								admitted.Add(1)
								l.Done(tk, sluice.Success, monoclock.Now(), 0)
							}
						}
					})
				}
			}
			time.Sleep(run)
			close(stop)
			offered := time.Since(start)
			wg.Wait()
			elapsed := time.Since(start)
			require.Zero(t, fallbacks.Load(), "decisions not made by Redis")
			bound := float64(burst) + elapsed.Seconds()*perSec(rate)
			floor := 0.95 * (float64(burst) + offered.Seconds()*perSec(rate))
			got := float64(admitted.Load())
			t.Logf("admitted %v of at most %.1f in %v (asked for %v)", got, bound, elapsed, offered)
			assert.LessOrEqual(t, got, bound)
			assert.GreaterOrEqual(t, got, floor)
		})
	}
}

// perSec is r in events per second.
func perSec(r ratelimit.Rate) float64 { return float64(r.Count) / r.Period.Seconds() }
