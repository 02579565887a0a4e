package bench

import (
	"context"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	kratosrl "github.com/go-kratos/aegis/ratelimit"
	"github.com/go-kratos/aegis/ratelimit/bbr"
	"github.com/zeromicro/go-zero/core/load"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
)

// adaptiveOp is one admitted call, admit and done, at instant now. The
// sluice rows take the instant as a Guard hands it to its policies; the
// peers read the clock themselves.
type adaptiveOp func(now time.Duration) bool

// adaptiveCases builds the rows of BenchmarkAdaptive; the returned function
// releases what they hold (the CPU sampler's goroutine).
func adaptiveCases(tb testing.TB) ([]string, map[string]adaptiveOp, func()) {
	ctx := context.Background()
	var closers []func()
	must := func(err error) {
		if err != nil {
			tb.Fatal(err)
		}
	}

	// The BBR guard on the process-wide sampler, as a service would run it.
	guard, err := adaptive.NewGuard()
	must(err)
	closers = append(closers, func() { _ = guard.Close() })
	// CPU pinned above the threshold: every request is checked against the
	// capacity estimate.
	hot, err := adaptive.NewGuard(adaptive.WithSampler(adaptive.NewManualSampler(0.95, 0)))
	must(err)
	// The guard inside a sluice.Guard, which reads the clock twice.
	inGuard, err := adaptive.NewGuard()
	must(err)
	chain, err := sluice.New(sluice.With(inGuard))
	must(err)
	closers = append(closers, func() { _ = chain.Close() })

	concurrency, err := adaptive.NewConcurrencyLimit()
	must(err)
	bulk, err := adaptive.NewBulkhead(1 << 20)
	must(err)

	kratos := bbr.NewLimiter()
	shedder := load.NewAdaptiveShedder()
	fsBulkhead := bulkhead.New[any](1 << 20)
	fsAdaptive := adaptivelimiter.NewWithDefaults[any]()

	policy := func(p sluice.Policy) adaptiveOp {
		return func(now time.Duration) bool {
			d, t := p.Admit(ctx, now)
			if d.Allowed {
				p.Done(t, sluice.Success, now, time.Millisecond)
			}
			return d.Allowed
		}
	}
	nop := func(context.Context) error { return nil }
	ops := map[string]adaptiveOp{
		"sluice-bbr":          policy(guard),
		"sluice-bbr-cpu-high": policy(hot),
		"sluice-bbr-in-guard": func(time.Duration) bool { return chain.Do(ctx, nop) == nil },
		"kratos-bbr": func(time.Duration) bool {
			done, err := kratos.Allow()
			if err != nil {
				return false
			}
			done(kratosrl.DoneInfo{})
			return true
		},
		"go-zero-shedder": func(time.Duration) bool {
			p, err := shedder.Allow()
			if err != nil {
				return false
			}
			p.Pass()
			return true
		},
		"sluice-concurrency": policy(concurrency),
		"sluice-bulkhead":    policy(bulk),
		"failsafe-bulkhead": func(time.Duration) bool {
			if !fsBulkhead.TryAcquirePermit() {
				return false
			}
			fsBulkhead.ReleasePermit()
			return true
		},
		"failsafe-adaptivelimiter": func(time.Duration) bool {
			p, ok := fsAdaptive.TryAcquirePermit()
			if !ok {
				return false
			}
			p.Record()
			return true
		},
	}
	names := []string{"sluice-bbr", "sluice-bbr-cpu-high", "sluice-bbr-in-guard", "kratos-bbr", "go-zero-shedder",
		"sluice-concurrency", "sluice-bulkhead", "failsafe-bulkhead", "failsafe-adaptivelimiter"}
	return names, ops, func() {
		for _, c := range closers {
			c()
		}
	}
}

// BenchmarkAdaptive compares one admitted call (admit and done) of sluice's
// load guard and concurrency limits with Kratos' BBR, go-zero's adaptive
// shedder and failsafe-go's bulkhead and adaptive limiter, serially and in
// parallel.
func BenchmarkAdaptive(b *testing.B) {
	names, ops, release := adaptiveCases(b)
	defer release()
	for _, name := range names {
		op := ops[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			now := time.Second
			for b.Loop() {
				now += time.Microsecond
				op(now)
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				now := time.Second
				for pb.Next() {
					now += time.Microsecond
					op(now)
				}
			})
		})
	}
}

// TestAdaptiveBenchRuns keeps the benchmark's set-up honest: every row admits.
func TestAdaptiveBenchRuns(t *testing.T) {
	names, ops, release := adaptiveCases(t)
	defer release()
	for _, name := range names {
		for i := range 100 {
			if !ops[name](time.Second + time.Duration(i)*time.Microsecond) {
				t.Fatalf("%s: call %d rejected", name, i)
			}
		}
	}
}
