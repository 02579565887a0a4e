package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	sentinel "github.com/alibaba/sentinel-golang/api"
	"github.com/alibaba/sentinel-golang/core/base"
	sentinelconfig "github.com/alibaba/sentinel-golang/core/config"
	"github.com/alibaba/sentinel-golang/core/flow"
	fsrate "github.com/failsafe-go/failsafe-go/ratelimiter"
	uberrate "go.uber.org/ratelimit"
	xrate "golang.org/x/time/rate"

	"github.com/sluice-go/sluice/ratelimit"
)

// The limiters run at a rate far above what a benchmark reaches, so every
// call is admitted and every row measures one full decision that takes
// quota: clock read, state update, answer. Each row is written out, so no
// closure call is measured.
const hugeRate = 1_000_000_000

var hugeLimit = ratelimit.Rate{Count: hugeRate, Period: time.Second}

// mustLimiter returns v, and panics on a constructor error: the benchmarks'
// parameters are constants.
func mustLimiter[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

const sentinelResource = "bench-limiter"

var sentinelOnce sync.Once

// sentinelFlow starts sentinel once, logging to a temporary directory, with a
// flow rule of the huge rate on sentinelResource, and returns its decision.
func sentinelFlow(b *testing.B) func() bool {
	sentinelOnce.Do(func() {
		conf := sentinelconfig.NewDefaultConfig()
		conf.Sentinel.Log.Dir = b.TempDir()
		if err := sentinel.InitWithConfig(conf); err != nil {
			b.Fatal(err)
		}
		if _, err := flow.LoadRules([]*flow.Rule{{
			Resource:               sentinelResource,
			TokenCalculateStrategy: flow.Direct,
			ControlBehavior:        flow.Reject,
			Threshold:              hugeRate,
			StatIntervalInMs:       1000,
		}}); err != nil {
			b.Fatal(err)
		}
	})
	return func() bool {
		e, blocked := sentinel.Entry(sentinelResource, sentinel.WithTrafficType(base.Inbound))
		if blocked != nil {
			return false
		}
		e.Exit()
		return true
	}
}

// BenchmarkLimiter compares one admitted decision, clock read included, of
// each sluice limiter and of the peer libraries, on one goroutine. The
// sluice-…-at rows take the instant as an argument, the decision alone, as a
// Guard runs it: AllowAt for the token bucket, Admit for GCRA. The other
// sluice rows read the clock: Allow for the token bucket, Admit given a
// fresh reading for the others.
func BenchmarkLimiter(b *testing.B) {
	b.Run("sluice-token-bucket", func(b *testing.B) {
		l := mustLimiter(ratelimit.NewTokenBucket(hugeLimit, hugeRate))
		b.ReportAllocs()
		for range b.N {
			l.Allow()
		}
	})
	b.Run("sluice-token-bucket-at", func(b *testing.B) {
		l := mustLimiter(ratelimit.NewTokenBucket(hugeLimit, hugeRate))
		b.ReportAllocs()
		for i := range b.N {
			l.AllowAt(time.Duration(i))
		}
	})
	b.Run("sluice-gcra", func(b *testing.B) {
		l := mustLimiter(ratelimit.NewGCRA(hugeLimit, hugeRate))
		ctx := context.Background()
		b.ReportAllocs()
		for range b.N {
			l.Admit(ctx, monoNow())
		}
	})
	b.Run("sluice-gcra-at", func(b *testing.B) {
		l := mustLimiter(ratelimit.NewGCRA(hugeLimit, hugeRate))
		ctx := context.Background()
		b.ReportAllocs()
		for i := range b.N {
			l.Admit(ctx, time.Duration(i))
		}
	})
	b.Run("sluice-warmup", func(b *testing.B) {
		l := mustLimiter(ratelimit.NewWarmUp(hugeLimit, hugeRate, time.Second, 3))
		ctx := context.Background()
		b.ReportAllocs()
		for range b.N {
			l.Admit(ctx, monoNow())
		}
	})
	b.Run("sluice-shaper", func(b *testing.B) {
		l := mustLimiter(ratelimit.NewShaper(hugeLimit, 0))
		ctx := context.Background()
		b.ReportAllocs()
		for range b.N {
			l.Admit(ctx, monoNow())
		}
	})
	b.Run("x-time-rate", func(b *testing.B) {
		l := xrate.NewLimiter(xrate.Limit(hugeRate), hugeRate)
		b.ReportAllocs()
		for range b.N {
			l.Allow()
		}
	})
	b.Run("uber-ratelimit-take", func(b *testing.B) {
		l := uberrate.New(hugeRate)
		b.ReportAllocs()
		for range b.N {
			l.Take()
		}
	})
	b.Run("failsafe-go-smooth", func(b *testing.B) {
		l := fsrate.NewSmooth[any](hugeRate, time.Second)
		b.ReportAllocs()
		for range b.N {
			l.TryAcquirePermit()
		}
	})
	b.Run("failsafe-go-bursty", func(b *testing.B) {
		l := fsrate.NewBursty[any](hugeRate, time.Second)
		b.ReportAllocs()
		for range b.N {
			l.TryAcquirePermit()
		}
	})
	b.Run("sentinel-flow", func(b *testing.B) {
		entry := sentinelFlow(b)
		b.ReportAllocs()
		for range b.N {
			entry()
		}
	})
}

// BenchmarkLimiterParallel is BenchmarkLimiter with every goroutine of
// RunParallel deciding on the same limiter.
func BenchmarkLimiterParallel(b *testing.B) {
	b.Run("sluice-token-bucket", func(b *testing.B) {
		l := mustLimiter(ratelimit.NewTokenBucket(hugeLimit, hugeRate))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Allow()
			}
		})
	})
	b.Run("sluice-token-bucket-at", func(b *testing.B) {
		l := mustLimiter(ratelimit.NewTokenBucket(hugeLimit, hugeRate))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var now time.Duration
			for pb.Next() {
				now++
				l.AllowAt(now)
			}
		})
	})
	b.Run("sluice-gcra", func(b *testing.B) {
		l := mustLimiter(ratelimit.NewGCRA(hugeLimit, hugeRate))
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Admit(ctx, monoNow())
			}
		})
	})
	b.Run("sluice-gcra-at", func(b *testing.B) {
		l := mustLimiter(ratelimit.NewGCRA(hugeLimit, hugeRate))
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var now time.Duration
			for pb.Next() {
				now++
				l.Admit(ctx, now)
			}
		})
	})
	b.Run("sluice-warmup", func(b *testing.B) {
		l := mustLimiter(ratelimit.NewWarmUp(hugeLimit, hugeRate, time.Second, 3))
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Admit(ctx, monoNow())
			}
		})
	})
	b.Run("sluice-shaper", func(b *testing.B) {
		l := mustLimiter(ratelimit.NewShaper(hugeLimit, 0))
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Admit(ctx, monoNow())
			}
		})
	})
	b.Run("x-time-rate", func(b *testing.B) {
		l := xrate.NewLimiter(xrate.Limit(hugeRate), hugeRate)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Allow()
			}
		})
	})
	b.Run("uber-ratelimit-take", func(b *testing.B) {
		l := uberrate.New(hugeRate)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Take()
			}
		})
	})
	b.Run("failsafe-go-smooth", func(b *testing.B) {
		l := fsrate.NewSmooth[any](hugeRate, time.Second)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.TryAcquirePermit()
			}
		})
	})
	b.Run("failsafe-go-bursty", func(b *testing.B) {
		l := fsrate.NewBursty[any](hugeRate, time.Second)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.TryAcquirePermit()
			}
		})
	})
	b.Run("sentinel-flow", func(b *testing.B) {
		entry := sentinelFlow(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				entry()
			}
		})
	})
}
