package bench

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/afex/hystrix-go/hystrix"
	sentinel "github.com/alibaba/sentinel-golang/api"
	sentinelcb "github.com/alibaba/sentinel-golang/core/circuitbreaker"
	sentinelconfig "github.com/alibaba/sentinel-golang/core/config"
	"github.com/failsafe-go/failsafe-go"
	fscb "github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/go-kratos/aegis/circuitbreaker/sre"
	gobreakerv1 "github.com/sony/gobreaker"
	gobreakerv2 "github.com/sony/gobreaker/v2"
	zerobreaker "github.com/zeromicro/go-zero/core/breaker"
	"github.com/zeromicro/go-zero/core/logx"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/breaker/gobreakeradapter"
)

var errDown = errors.New("dependency down")

// BenchmarkBreakerClosed compares one call through a closed breaker that
// succeeds: admit, then report the success, clock reads included, as each
// library is meant to be used on its own. The sluice rows:
//
//   - sluice: Allow + Finish with the defaults (5 consecutive failures, a
//     count window): no clock read at all;
//   - sluice-rolling: an error ratio on a rolling 10s window, one clock read;
//   - sluice-slow: a slow-call ratio on a rolling window, two clock reads;
//   - sluice-policy: Admit + Done given the instant, what a Guard pays;
//   - sluice-guard and guard-nop: a Guard holding the breaker, and the same
//     Guard with a no-op policy; their difference is the breaker's share;
//   - sluice-gobreaker-adapter: gobreaker v2 as the Guard's engine.
func BenchmarkBreakerClosed(b *testing.B) {
	ctx := context.Background()
	allowFinish := func(br *breaker.Breaker) func() {
		return func() {
			if pm, err := br.Allow(); err == nil {
				pm.Finish(nil)
			}
		}
	}
	row(b, "sluice", func() func() { return allowFinish(mustBreaker(breaker.New("bench"))) })
	row(b, "sluice-rolling", func() func() {
		return allowFinish(mustBreaker(breaker.New("bench", breaker.WithRollingWindow(10*time.Second, 10),
			breaker.WithErrorRatio(0.5, 20))))
	})
	row(b, "sluice-slow", func() func() {
		return allowFinish(mustBreaker(breaker.New("bench", breaker.WithRollingWindow(10*time.Second, 10),
			breaker.WithSlowCallRatio(time.Second, 0.5, 20))))
	})
	row(b, "sluice-policy", func() func() {
		br := mustBreaker(breaker.New("bench", breaker.WithRollingWindow(10*time.Second, 10), breaker.WithErrorRatio(0.5, 20)))
		now := time.Second // the Guard's instant; one per call in real use
		return func() {
			if d, t := br.Admit(ctx, now); d.Allowed {
				br.Done(t, sluice.Success, now, time.Microsecond)
			}
		}
	})
	ok := func(context.Context) error { return nil }
	row(b, "sluice-guard", func() func() {
		br := mustBreaker(breaker.New("bench", breaker.WithRollingWindow(10*time.Second, 10), breaker.WithErrorRatio(0.5, 20)))
		g := mustBreaker(sluice.New(sluice.With(br)))
		return func() { _ = g.Do(ctx, ok) }
	})
	row(b, "guard-nop", func() func() {
		g := mustBreaker(sluice.New(sluice.With(nopPolicy{})))
		return func() { _ = g.Do(ctx, ok) }
	})
	row(b, "sluice-gobreaker-adapter", func() func() {
		ad := mustBreaker(gobreakeradapter.NewFromSettings(gobreakerv2.Settings{Name: "bench"}))
		return func() {
			if d, t := ad.Admit(ctx, 0); d.Allowed {
				ad.Done(t, sluice.Success, 0, 0)
			}
		}
	})
	row(b, "gobreaker-v1", func() func() {
		cb := gobreakerv1.NewTwoStepCircuitBreaker(gobreakerv1.Settings{Name: "bench"})
		return func() {
			if done, err := cb.Allow(); err == nil {
				done(true)
			}
		}
	})
	row(b, "gobreaker-v2", func() func() {
		cb := gobreakerv2.NewTwoStepCircuitBreaker[any](gobreakerv2.Settings{Name: "bench"})
		return func() {
			if done, err := cb.Allow(); err == nil {
				done(nil)
			}
		}
	})
	row(b, "failsafe-go", func() func() {
		ex := failsafe.With[any](fscb.NewWithDefaults[any]())
		fn := func() error { return nil }
		return func() { _ = ex.Run(fn) }
	})
	row(b, "sentinel", func() func() {
		res := sentinelBreaker(b, "bench-breaker-closed", 1e9)
		return func() {
			if e, blocked := sentinel.Entry(res); blocked == nil {
				e.Exit()
			}
		}
	})
	row(b, "hystrix", func() func() {
		hystrix.ConfigureCommand("bench-closed", hystrix.CommandConfig{Timeout: 10_000, MaxConcurrentRequests: 1 << 20})
		fn := func() error { return nil }
		return func() { _ = hystrix.Do("bench-closed", fn, nil) }
	})
	row(b, "go-zero", func() func() {
		logx.Disable()
		cb := zerobreaker.NewBreaker()
		return func() {
			if p, err := cb.Allow(); err == nil {
				p.Accept()
			}
		}
	})
	row(b, "kratos-sre", func() func() {
		cb := sre.NewBreaker()
		return func() {
			if cb.Allow() == nil {
				cb.MarkSuccess()
			}
		}
	})
}

// BenchmarkBreakerOpen compares the rejection of a call by an open breaker,
// clock reads included. go-zero's and Kratos' breakers are probabilistic
// throttles with no open state: their rows measure them after a run of
// failures, where they reject nearly every call.
func BenchmarkBreakerOpen(b *testing.B) {
	ctx := context.Background()
	row(b, "sluice", func() func() {
		br := mustBreaker(breaker.New("bench", breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(time.Hour)))
		pm, _ := br.Allow()
		pm.Record(sluice.Failure)
		return func() { _, _ = br.Decide() }
	})
	row(b, "sluice-forced", func() func() {
		br := mustBreaker(breaker.New("bench"))
		br.ForceOpen()
		return func() { _, _ = br.Decide() }
	})
	row(b, "sluice-policy", func() func() {
		br := mustBreaker(breaker.New("bench"))
		br.OpenFor(sluice.Now(), time.Hour)
		return func() { _, _ = br.Admit(ctx, sluice.Now()) }
	})
	row(b, "gobreaker-v1", func() func() {
		cb := gobreakerv1.NewTwoStepCircuitBreaker(gobreakerv1.Settings{Name: "bench", Timeout: time.Hour})
		for range 6 {
			if done, err := cb.Allow(); err == nil {
				done(false)
			}
		}
		return func() { _, _ = cb.Allow() }
	})
	row(b, "gobreaker-v2", func() func() {
		cb := gobreakerv2.NewTwoStepCircuitBreaker[any](gobreakerv2.Settings{Name: "bench", Timeout: time.Hour})
		for range 6 {
			if done, err := cb.Allow(); err == nil {
				done(errDown)
			}
		}
		return func() { _, _ = cb.Allow() }
	})
	row(b, "failsafe-go", func() func() {
		cb := fscb.NewWithDefaults[any]()
		cb.Open()
		ex := failsafe.With[any](cb)
		fn := func() error { return nil }
		return func() { _ = ex.Run(fn) }
	})
	row(b, "sentinel", func() func() {
		res := sentinelBreaker(b, "bench-breaker-open", 1)
		for range 5 {
			if e, blocked := sentinel.Entry(res); blocked == nil {
				sentinel.TraceError(e, errDown)
				e.Exit()
			}
		}
		if e, blocked := sentinel.Entry(res); blocked == nil {
			e.Exit()
			b.Fatal("sentinel breaker did not open")
		}
		return func() {
			if e, blocked := sentinel.Entry(res); blocked == nil {
				e.Exit()
			}
		}
	})
	row(b, "hystrix", func() func() {
		hystrixOpen(b, "bench-open")
		fn := func() error { return nil }
		return func() { _ = hystrix.Do("bench-open", fn, nil) }
	})
	row(b, "go-zero", func() func() {
		logx.Disable()
		cb := zerobreaker.NewBreaker()
		for range 1000 {
			_ = cb.Do(func() error { return errDown })
		}
		return func() {
			if p, err := cb.Allow(); err == nil {
				p.Reject("down")
			}
		}
	})
	row(b, "kratos-sre", func() func() {
		cb := sre.NewBreaker()
		for range 1000 {
			if cb.Allow() == nil {
				cb.MarkFailed()
			}
		}
		return func() {
			if cb.Allow() == nil {
				cb.MarkFailed()
			}
		}
	})
}

// row benchmarks the operation that setup returns, serially and in
// parallel, with allocations reported; setup runs only when the row is
// selected.
func row(b *testing.B, name string, setup func() func()) {
	b.Run(name, func(b *testing.B) {
		op := setup()
		b.ReportAllocs()
		for b.Loop() {
			op()
		}
	})
	b.Run(name+"/parallel", func(b *testing.B) {
		op := setup()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				op()
			}
		})
	})
}

var sentinelBreakerOnce sync.Once

// sentinelBreaker makes sure sentinel runs, logging to a temporary
// directory, and loads an error-count breaker rule of threshold on a
// resource. Sentinel's state is global: when the limiter rows started it
// first, a second start is refused and the one running serves.
func sentinelBreaker(b *testing.B, resource string, threshold float64) string {
	sentinelBreakerOnce.Do(func() {
		conf := sentinelconfig.NewDefaultConfig()
		conf.Sentinel.Log.Dir = os.TempDir() + "/sluice-bench-sentinel"
		if err := sentinel.InitWithConfig(conf); err != nil {
			b.Logf("sentinel: %v", err)
		}
	})
	if _, err := sentinelcb.LoadRulesOfResource(resource, []*sentinelcb.Rule{{
		Resource:         resource,
		Strategy:         sentinelcb.ErrorCount,
		RetryTimeoutMs:   3_600_000,
		MinRequestAmount: 1,
		StatIntervalMs:   10_000,
		Threshold:        threshold,
	}}); err != nil {
		b.Fatal(err)
	}
	return resource
}

// hystrixOpen configures a hystrix command and fails it until its circuit
// opens; hystrix updates its health from a metrics goroutine, so this waits
// for it, a second at most.
func hystrixOpen(b *testing.B, name string) {
	hystrix.ConfigureCommand(name, hystrix.CommandConfig{
		Timeout: 10_000, MaxConcurrentRequests: 1 << 20,
		RequestVolumeThreshold: 1, ErrorPercentThreshold: 1, SleepWindow: 3_600_000,
	})
	c, _, err := hystrix.GetCircuit(name)
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for !c.IsOpen() {
		if time.Now().After(deadline) {
			b.Fatal("hystrix circuit did not open")
		}
		_ = hystrix.Do(name, func() error { return errDown }, nil)
		time.Sleep(time.Millisecond)
	}
}

// mustBreaker returns v, and panics on a set-up error.
func mustBreaker[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
