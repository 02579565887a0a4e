package bench

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/zeromicro/go-zero/core/limit"
	"github.com/zeromicro/go-zero/core/logx"
	zeroredis "github.com/zeromicro/go-zero/core/stores/redis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
)

// The Redis-backed limiters side by side, against one local redis-server:
// sluice's four algorithms, go-redis/redis_rate (GCRA) and go-zero's
// PeriodLimit (fixed window) and TokenLimiter. Every limit is far above the
// offered load, so every decision admits and writes, the costlier path.
//
// Each benchmark also reports the server's CPU time per decision
// (redis-µs/op, from INFO commandstats).

// redisDecider is one library's decision on the key it was made for, and
// whether it admitted.
type redisDecider func(ctx context.Context) bool

type redisPeer struct {
	name string
	make func(tb testing.TB, addr, key string) redisDecider
}

func limiterClient(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// sluiceRedis decides through a limiter's Admit and Done, as a Guard does,
// for a request whose context carries its key (as middleware sets it).
func sluiceRedis(newLimiter func(c redis.UniversalClient) (*redislimit.Limiter, error)) func(testing.TB, string, string) redisDecider {
	return func(tb testing.TB, addr, key string) redisDecider {
		l, err := newLimiter(limiterClient(tb, addr))
		if err != nil {
			tb.Fatal(err)
		}
		keyed := sluice.WithKey(context.Background(), key)
		return func(context.Context) bool {
			d, tk := l.Admit(keyed, sluice.Now())
			if d.Allowed {
				l.Done(tk, sluice.Success, 0, 0)
			}
			return d.Allowed && d.Policy == l.Name()
		}
	}
}

var redisPeers = []redisPeer{
	{"sluice/gcra", sluiceRedis(func(c redis.UniversalClient) (*redislimit.Limiter, error) {
		return redislimit.NewGCRA(c, ratelimit.PerSecond(1_000_000), 1_000_000, redislimit.WithName("bench/gcra"))
	})},
	{"sluice/token-bucket", sluiceRedis(func(c redis.UniversalClient) (*redislimit.Limiter, error) {
		return redislimit.NewTokenBucket(c, ratelimit.PerSecond(1_000_000), 1_000_000, redislimit.WithName("bench/tb"))
	})},
	{"sluice/fixed-window", sluiceRedis(func(c redis.UniversalClient) (*redislimit.Limiter, error) {
		return redislimit.NewFixedWindow(c, 100_000_000, 1e9, redislimit.WithName("bench/fw"))
	})},
	{"sluice/sliding-window", sluiceRedis(func(c redis.UniversalClient) (*redislimit.Limiter, error) {
		return redislimit.NewSlidingWindow(c, 100_000_000, 1e9, redislimit.WithName("bench/sw"))
	})},
	{"redis_rate", func(tb testing.TB, addr, key string) redisDecider {
		l := redis_rate.NewLimiter(limiterClient(tb, addr))
		lim := redis_rate.PerSecond(1_000_000)
		return func(ctx context.Context) bool {
			res, err := l.Allow(ctx, key, lim)
			return err == nil && res.Allowed > 0
		}
	}},
	{"go-zero/period", func(tb testing.TB, addr, key string) redisDecider {
		logx.Disable()
		l := limit.NewPeriodLimit(1, 100_000_000, zeroredis.New(addr), "bench-period")
		return func(ctx context.Context) bool {
			s, err := l.TakeCtx(ctx, key)
			return err == nil && s == limit.Allowed
		}
	}},
	{"go-zero/token", func(tb testing.TB, addr, key string) redisDecider {
		logx.Disable()
		// go-zero's TokenLimiter has one key per limiter.
		l := limit.NewTokenLimiter(1_000_000, 1_000_000, zeroredis.New(addr), "bench-token-"+key)
		return func(ctx context.Context) bool { return l.AllowCtx(ctx) }
	}},
}

// reportRedisCPU reports the server's CPU per script call since the last
// CONFIG RESETSTAT.
func reportRedisCPU(b *testing.B, admin *redis.Client) {
	usec, err := scriptCPU(context.Background(), admin)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(usec, "redis-µs/op")
}

// failIfMissed fails a row in which some decisions did not admit through
// Redis (a timeout answered by the failure policy, say): its figure would
// not be Redis's.
func failIfMissed(b *testing.B, missed int) {
	if missed > 0 {
		b.Fatalf("%d decisions not admitted through Redis", missed)
	}
}

// BenchmarkRedisSerial: one caller, decisions one after another.
func BenchmarkRedisSerial(b *testing.B) {
	addr := startRedis(b)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { _ = admin.Close() })
	for _, p := range redisPeers {
		b.Run(p.name, func(b *testing.B) {
			decide := p.make(b, addr, "serial")
			ctx := context.Background()
			if !decide(ctx) {
				b.Fatal("the first decision did not admit through Redis")
			}
			admin.ConfigResetStat(ctx)
			var missed int
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if !decide(ctx) {
					missed++
				}
			}
			b.StopTimer()
			failIfMissed(b, missed)
			reportRedisCPU(b, admin)
		})
	}
}

// BenchmarkRedisParallel8: 8 callers on one key.
func BenchmarkRedisParallel8(b *testing.B) {
	addr := startRedis(b)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { _ = admin.Close() })
	for _, p := range redisPeers {
		b.Run(p.name, func(b *testing.B) {
			decide := p.make(b, addr, "shared")
			ctx := context.Background()
			if !decide(ctx) {
				b.Fatal("the first decision did not admit through Redis")
			}
			admin.ConfigResetStat(ctx)
			procs := runtime.GOMAXPROCS(0)
			b.SetParallelism((8 + procs - 1) / procs)
			b.ReportAllocs()
			b.ResetTimer()
			var missed atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				n := int64(0)
				for pb.Next() {
					if !decide(ctx) {
						n++
					}
				}
				missed.Add(n)
			})
			b.StopTimer()
			failIfMissed(b, int(missed.Load()))
			reportRedisCPU(b, admin)
		})
	}
}
