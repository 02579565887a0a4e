package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	echomw "github.com/labstack/echo/v4/middleware"
	xrate "golang.org/x/time/rate"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// windowLimiter is what every window limiter of sluice offers.
type windowLimiter interface {
	sluice.Policy
}

// windowRow is one window limiter, sized so that no call of a benchmark is
// rejected: every row measures a decision that takes quota.
type windowRow struct {
	name string
	new  func() (windowLimiter, error)
}

func (r windowRow) make(b *testing.B) windowLimiter {
	b.Helper()
	l, err := r.new()
	if err != nil {
		b.Fatal(err)
	}
	return l
}

var windowRows = []windowRow{
	{"fixed-window", func() (windowLimiter, error) {
		return ratelimit.NewFixedWindow(1<<36, time.Hour)
	}},
	{"sliding-window", func() (windowLimiter, error) {
		return ratelimit.NewSlidingWindow(1<<32, time.Hour, 60)
	}},
	{"sliding-log", func() (windowLimiter, error) {
		// Entries leave after 1ms: the ring stays at the calls of one
		// millisecond (at most 20,000 with the …At rows' 50ns steps).
		return ratelimit.NewSlidingLog(1<<20, time.Millisecond)
	}},
	{"leaky-bucket", func() (windowLimiter, error) {
		return ratelimit.NewLeakyBucket(ratelimit.Rate{Count: windowHuge, Period: time.Second}, windowHuge)
	}},
}

// windowHuge is a rate, per second, far above what a benchmark reaches.
const windowHuge = 1_000_000_000

// atStep is how far the instant of the …At rows advances per call: 20
// million requests a second.
const atStep = 50 * time.Nanosecond

// BenchmarkLimiterWindow measures one admitted decision of each window
// limiter through Admit: "allow" with a fresh clock reading, "allow-at" given
// the instant, as a Guard runs it. The peers' rows (sentinel-flow counts in a sliding window of
// buckets) are BenchmarkLimiter's, in the same run.
func BenchmarkLimiterWindow(b *testing.B) {
	for _, row := range windowRows {
		b.Run(row.name+"/allow", func(b *testing.B) {
			l := row.make(b)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l.Admit(ctx, monoNow())
			}
		})
		b.Run(row.name+"/allow-at", func(b *testing.B) {
			l := row.make(b)
			b.ReportAllocs()
			ctx := context.Background()
			var now time.Duration
			for b.Loop() {
				now += atStep
				l.Admit(ctx, now)
			}
		})
	}
}

// BenchmarkLimiterWindowParallel is BenchmarkLimiterWindow with every
// goroutine of RunParallel deciding on the same limiter.
func BenchmarkLimiterWindowParallel(b *testing.B) {
	for _, row := range windowRows {
		b.Run(row.name+"/allow", func(b *testing.B) {
			l := row.make(b)
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Admit(ctx, monoNow())
				}
			})
		})
		b.Run(row.name+"/allow-at", func(b *testing.B) {
			l := row.make(b)
			b.ReportAllocs()
			clock := sluice.NewManualClock(0)
			ctx := context.Background()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Admit(ctx, clock.Advance(atStep))
				}
			})
		})
	}
}

// keyedLimiter is sluice's Keyed with a GCRA per key, or with a fixed window,
// both sized so that no call is rejected.
func keyedLimiter(b *testing.B, fixed bool) *ratelimit.Keyed {
	huge := ratelimit.Rate{Count: windowHuge, Period: time.Second}
	k, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		if fixed {
			return ratelimit.NewFixedWindow(1<<36, time.Hour)
		}
		return ratelimit.NewGCRA(huge, windowHuge)
	}, ratelimit.WithIdleTTL(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	return k
}

// echoStore is Echo's in-memory store (an x/time/rate limiter per key),
// with the same idle expiry.
func echoStore() *echomw.RateLimiterMemoryStore {
	return echomw.NewRateLimiterMemoryStoreWithConfig(echomw.RateLimiterMemoryStoreConfig{
		Rate: xrate.Limit(windowHuge), Burst: windowHuge, ExpiresIn: 3 * time.Minute,
	})
}

// manyKeys are the keys of the …/10k-keys rows: 10,000 clients, all known
// to the store, taking turns.
var manyKeys = func() []string {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "198.51." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	return keys
}()

const oneKey = "203.0.113.7"

// oneKeyCtx and manyKeyCtxs carry oneKey and manyKeys, made once.
var (
	oneKeyCtx   = sluice.WithKey(context.Background(), oneKey)
	manyKeyCtxs = func() []context.Context {
		ctxs := make([]context.Context, len(manyKeys))
		for i, key := range manyKeys {
			ctxs[i] = sluice.WithKey(context.Background(), key)
		}
		return ctxs
	}()
)

// allowKey decides on one request with the key of ctx, reading the clock,
// and ends its admission, as a Guard does.
func allowKey(k *ratelimit.Keyed, ctx context.Context) {
	now := monoNow()
	if t, _, err := k.Admit(ctx, now); err == nil {
		k.Done(t, sluice.Success, now, -1)
	}
}

// BenchmarkLimiterKeyed measures one admitted decision on a key the store
// already holds, clock read included: sluice's Keyed (Admit and Done with
// the key in the context; "admit" is given the instant, as a Guard does)
// next to Echo's memory store (Allow(identifier)).
func BenchmarkLimiterKeyed(b *testing.B) {
	b.Run("sluice", func(b *testing.B) {
		k := keyedLimiter(b, false)
		allowKey(k, oneKeyCtx)
		b.ReportAllocs()
		for b.Loop() {
			allowKey(k, oneKeyCtx)
		}
	})
	b.Run("sluice-fixed-window", func(b *testing.B) {
		k := keyedLimiter(b, true)
		allowKey(k, oneKeyCtx)
		b.ReportAllocs()
		for b.Loop() {
			allowKey(k, oneKeyCtx)
		}
	})
	b.Run("sluice-admit", func(b *testing.B) {
		k := keyedLimiter(b, false)
		ctx := sluice.WithKey(context.Background(), oneKey)
		b.ReportAllocs()
		var now time.Duration
		for b.Loop() {
			now += atStep
			if t, _, err := k.Admit(ctx, now); err == nil {
				k.Done(t, sluice.Success, now, -1)
			}
		}
	})
	b.Run("echo-memory-store", func(b *testing.B) {
		s := echoStore()
		_, _ = s.Allow(oneKey)
		b.ReportAllocs()
		for b.Loop() {
			_, _ = s.Allow(oneKey)
		}
	})
	b.Run("sluice/10k-keys", func(b *testing.B) {
		k := keyedLimiter(b, false)
		for _, ctx := range manyKeyCtxs {
			allowKey(k, ctx)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			allowKey(k, manyKeyCtxs[i])
			if i++; i == len(manyKeys) {
				i = 0
			}
		}
	})
	b.Run("echo-memory-store/10k-keys", func(b *testing.B) {
		s := echoStore()
		for _, key := range manyKeys {
			_, _ = s.Allow(key)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			_, _ = s.Allow(manyKeys[i])
			if i++; i == len(manyKeys) {
				i = 0
			}
		}
	})
}

// BenchmarkLimiterKeyedParallel is BenchmarkLimiterKeyed with the goroutines
// of RunParallel all on one key, or each walking the 10,000 known keys
// (where sluice's shards meet Echo's one lock).
func BenchmarkLimiterKeyedParallel(b *testing.B) {
	b.Run("sluice/one-key", func(b *testing.B) {
		k := keyedLimiter(b, false)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				allowKey(k, oneKeyCtx)
			}
		})
	})
	b.Run("echo-memory-store/one-key", func(b *testing.B) {
		s := echoStore()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = s.Allow(oneKey)
			}
		})
	})
	b.Run("sluice/10k-keys", func(b *testing.B) {
		k := keyedLimiter(b, false)
		for _, ctx := range manyKeyCtxs {
			allowKey(k, ctx)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				allowKey(k, manyKeyCtxs[i])
				if i++; i == len(manyKeys) {
					i = 0
				}
			}
		})
	})
	b.Run("echo-memory-store/10k-keys", func(b *testing.B) {
		s := echoStore()
		for _, key := range manyKeys {
			_, _ = s.Allow(key)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				_, _ = s.Allow(manyKeys[i])
				if i++; i == len(manyKeys) {
					i = 0
				}
			}
		})
	})
}
