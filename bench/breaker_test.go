package bench

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
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

// breakerRow is one row of the breaker benchmarks: setup builds the breaker
// and returns one call through it, which reports whether the call was let
// through. setup runs only when its row is selected.
type breakerRow struct {
	name  string
	setup func(tb testing.TB) func() bool
	// probabilistic rows (throttles with no open state) reject most calls,
	// not all, once the dependency fails.
	probabilistic bool
}

// alone returns a Guard of br alone: the two-step form of a breaker.
func alone(br *breaker.Breaker) *sluice.Guard {
	g, err := sluice.New(sluice.With(br))
	if err != nil {
		panic(err)
	}
	return g
}

func allowFinish(br *breaker.Breaker) func() bool {
	g, ctx := alone(br), context.Background()
	return func() bool {
		var call sluice.Call
		err := g.Begin(ctx, &call)
		if err != nil {
			return false
		}
		call.End(nil)
		return true
	}
}

// benchBreaker makes a breaker for a row, failing tb on a set-up error.
func benchBreaker(tb testing.TB, opts ...breaker.Option) *breaker.Breaker {
	br, err := breaker.New("bench", opts...)
	setupErr(tb, err)
	return br
}

func rolling(tb testing.TB, opts ...breaker.Option) *breaker.Breaker {
	return benchBreaker(tb, append([]breaker.Option{breaker.WithRollingWindow(10*time.Second, 10)}, opts...)...)
}

func setupErr(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// closedRows: one call through a closed breaker that succeeds, admit and
// report, clock reads included, as each library is meant to be used on its
// own. The sluice rows:
//
//   - sluice: Allow + Finish with the defaults (5 consecutive failures, a
//     count window): no clock read at all;
//   - sluice-rolling: an error ratio on a rolling 10s window, one clock read;
//   - sluice-slow: a slow-call ratio on a rolling window, two clock reads;
//   - sluice-policy: Admit + Done given the instant, what a Guard pays;
//   - sluice-guard and guard-nop: a Guard holding the breaker, and the same
//     Guard with a no-op policy; their difference is the breaker's share;
//   - sluice-gobreaker-adapter: gobreaker v2 as the Guard's engine.
var closedRows = []breakerRow{
	{name: "sluice", setup: func(tb testing.TB) func() bool {
		return allowFinish(benchBreaker(tb))
	}},
	{name: "sluice-rolling", setup: func(tb testing.TB) func() bool {
		return allowFinish(rolling(tb, breaker.WithErrorRatio(0.5, 20)))
	}},
	{name: "sluice-slow", setup: func(tb testing.TB) func() bool {
		return allowFinish(rolling(tb, breaker.WithSlowCallRatio(time.Second, 0.5, 20)))
	}},
	{name: "sluice-policy", setup: func(tb testing.TB) func() bool {
		br := rolling(tb, breaker.WithErrorRatio(0.5, 20))
		ctx := context.Background()
		return func() bool { // the two clock reads a Guard makes for it
			now := monoNow()
			t, _, err := br.Admit(ctx, now)
			if err == nil {
				end := monoNow()
				br.Done(t, sluice.Success, end, end-now)
			}
			return err == nil
		}
	}},
	{name: "sluice-guard", setup: func(tb testing.TB) func() bool {
		return guardDo(tb, rolling(tb, breaker.WithErrorRatio(0.5, 20)))
	}},
	{name: "guard-nop", setup: func(tb testing.TB) func() bool {
		return guardDo(tb, nopPolicy{})
	}},
	{name: "sluice-gobreaker-adapter", setup: func(tb testing.TB) func() bool {
		ad, err := gobreakeradapter.New(gobreakerv2.Settings{Name: "bench"})
		setupErr(tb, err)
		ctx := context.Background()
		return func() bool {
			t, _, err := ad.Admit(ctx, 0)
			if err == nil {
				ad.Done(t, sluice.Success, 0, 0)
			}
			return err == nil
		}
	}},
	{name: "gobreaker-v1", setup: func(testing.TB) func() bool {
		cb := gobreakerv1.NewTwoStepCircuitBreaker(gobreakerv1.Settings{Name: "bench"})
		return func() bool {
			done, err := cb.Allow()
			if err == nil {
				done(true)
			}
			return err == nil
		}
	}},
	{name: "gobreaker-v2", setup: func(testing.TB) func() bool {
		cb := gobreakerv2.NewTwoStepCircuitBreaker[any](gobreakerv2.Settings{Name: "bench"})
		return func() bool {
			done, err := cb.Allow()
			if err == nil {
				done(nil)
			}
			return err == nil
		}
	}},
	{name: "failsafe-go", setup: func(testing.TB) func() bool {
		ex := failsafe.With[any](fscb.NewWithDefaults[any]())
		fn := func() error { return nil }
		return func() bool { return ex.Run(fn) == nil }
	}},
	{name: "failsafe-go-direct", setup: func(testing.TB) func() bool {
		cb := fscb.NewWithDefaults[any]()
		return func() bool {
			if !cb.TryAcquirePermit() {
				return false
			}
			cb.RecordSuccess()
			return true
		}
	}},
	{name: "sentinel", setup: func(tb testing.TB) func() bool {
		return sentinelCall(sentinelBreaker(tb, "bench-breaker-closed", 1e9))
	}},
	{name: "hystrix", setup: func(testing.TB) func() bool {
		// Tickets go back asynchronously: with a small pool, some calls
		// would be turned away for concurrency and cost less.
		hystrix.ConfigureCommand("bench-closed", hystrix.CommandConfig{Timeout: 10_000, MaxConcurrentRequests: 1 << 20})
		fn := func() error { return nil }
		return func() bool { return hystrix.Do("bench-closed", fn, nil) == nil }
	}},
	{name: "go-zero", setup: func(testing.TB) func() bool {
		logx.Disable()
		cb := zerobreaker.NewBreaker()
		return func() bool {
			p, err := cb.Allow()
			if err == nil {
				p.Accept()
			}
			return err == nil
		}
	}},
	{name: "kratos-sre", setup: func(testing.TB) func() bool {
		cb := sre.NewBreaker()
		return func() bool {
			if cb.Allow() != nil {
				return false
			}
			cb.MarkSuccess()
			return true
		}
	}},
}

// openRows: the rejection of a call by an open breaker, clock reads
// included. go-zero's and Kratos' breakers are probabilistic throttles with
// no open state: their rows measure them after a run of failures, where they
// reject nearly every call.
var openRows = []breakerRow{
	{name: "sluice", setup: func(tb testing.TB) func() bool {
		br := benchBreaker(tb, breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(time.Hour))
		g, ctx := alone(br), context.Background()
		var call sluice.Call
		_ = g.Begin(ctx, &call)
		call.Report(sluice.Failure, nil)
		return func() bool { var c sluice.Call; return g.Begin(ctx, &c) == nil }
	}},
	{name: "sluice-do", setup: func(tb testing.TB) func() bool {
		br := benchBreaker(tb, breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(time.Hour))
		br.OpenFor(context.Background(), monoNow(), time.Hour)
		return guardDo(tb, br)
	}},
	{name: "sluice-forced", setup: func(tb testing.TB) func() bool {
		br := benchBreaker(tb)
		br.ForceOpen()
		g, ctx := alone(br), context.Background()
		return func() bool { var c sluice.Call; return g.Begin(ctx, &c) == nil }
	}},
	{name: "sluice-policy", setup: func(tb testing.TB) func() bool {
		br := benchBreaker(tb)
		br.OpenFor(context.Background(), monoNow(), time.Hour)
		ctx := context.Background()
		return func() bool { _, _, err := br.Admit(ctx, monoNow()); return err == nil }
	}},
	{name: "gobreaker-v1", setup: func(testing.TB) func() bool {
		cb := gobreakerv1.NewTwoStepCircuitBreaker(gobreakerv1.Settings{Name: "bench", Timeout: time.Hour})
		for range 6 {
			if done, err := cb.Allow(); err == nil {
				done(false)
			}
		}
		return func() bool { _, err := cb.Allow(); return err == nil }
	}},
	{name: "gobreaker-v2", setup: func(testing.TB) func() bool {
		cb := gobreakerv2.NewTwoStepCircuitBreaker[any](gobreakerv2.Settings{Name: "bench", Timeout: time.Hour})
		for range 6 {
			if done, err := cb.Allow(); err == nil {
				done(errDown)
			}
		}
		return func() bool { _, err := cb.Allow(); return err == nil }
	}},
	{name: "failsafe-go", setup: func(testing.TB) func() bool {
		cb := fscb.NewWithDefaults[any]()
		cb.Open()
		ex := failsafe.With[any](cb)
		fn := func() error { return nil }
		return func() bool { return ex.Run(fn) == nil }
	}},
	{name: "failsafe-go-direct", setup: func(testing.TB) func() bool {
		cb := fscb.NewWithDefaults[any]()
		cb.Open()
		return cb.TryAcquirePermit
	}},
	{name: "sentinel", setup: func(tb testing.TB) func() bool {
		res := sentinelBreaker(tb, "bench-breaker-open", 1)
		for range 5 {
			if e, blocked := sentinel.Entry(res); blocked == nil {
				sentinel.TraceError(e, errDown)
				e.Exit()
			}
		}
		return sentinelCall(res)
	}},
	{name: "hystrix", setup: func(tb testing.TB) func() bool {
		hystrixOpen(tb, "bench-open")
		fn := func() error { return nil }
		return func() bool { return hystrix.Do("bench-open", fn, nil) == nil }
	}},
	{name: "go-zero", probabilistic: true, setup: func(testing.TB) func() bool {
		logx.Disable()
		cb := zerobreaker.NewBreaker()
		for range 1000 {
			_ = cb.Do(func() error { return errDown })
		}
		return func() bool {
			p, err := cb.Allow()
			if err == nil {
				p.Reject("down")
			}
			return err == nil
		}
	}},
	{name: "kratos-sre", probabilistic: true, setup: func(testing.TB) func() bool {
		cb := sre.NewBreaker()
		for range 1000 {
			if cb.Allow() == nil {
				cb.MarkFailed()
			}
		}
		return func() bool {
			if cb.Allow() != nil {
				return false
			}
			cb.MarkFailed()
			return true
		}
	}},
}

// BenchmarkBreakerClosed runs closedRows, serially and in parallel.
func BenchmarkBreakerClosed(b *testing.B) { benchRows(b, closedRows, true) }

// BenchmarkBreakerOpen runs openRows, serially and in parallel.
func BenchmarkBreakerOpen(b *testing.B) { benchRows(b, openRows, false) }

// benchRows runs each row, and fails it when its calls did not all answer
// want (a closed breaker that rejected some, an open one that let some
// through), unless the row is probabilistic: the figure would not be the
// row's.
func benchRows(b *testing.B, rows []breakerRow, want bool) {
	check := func(b *testing.B, r breakerRow, other int64) {
		if other > 0 && !r.probabilistic {
			b.Fatalf("%d calls answered %v", other, !want)
		}
	}
	for _, r := range rows {
		b.Run(r.name, func(b *testing.B) {
			op := r.setup(b)
			var other int64
			b.ReportAllocs()
			for b.Loop() {
				if op() != want {
					other++
				}
			}
			check(b, r, other)
		})
		b.Run(r.name+"/parallel", func(b *testing.B) {
			op := r.setup(b)
			var other atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				n := int64(0)
				for pb.Next() {
					if op() != want {
						n++
					}
				}
				other.Add(n)
			})
			check(b, r, other.Load())
		})
	}
}

// TestBreakerBenchRows keeps the rows honest: every closed row lets its
// calls through, and every open row rejects them.
func TestBreakerBenchRows(t *testing.T) {
	check := func(t *testing.T, rows []breakerRow, want bool) {
		for _, r := range rows {
			t.Run(r.name, func(t *testing.T) {
				op := r.setup(t)
				same := 0
				for range 100 {
					if op() == want {
						same++
					}
				}
				if r.probabilistic {
					if same < 80 {
						t.Fatalf("%d of 100 calls answered %v", same, want)
					}
				} else if same != 100 {
					t.Fatalf("%d of 100 calls answered %v", same, want)
				}
			})
		}
	}
	t.Run("closed", func(t *testing.T) { check(t, closedRows, true) })
	t.Run("open", func(t *testing.T) { check(t, openRows, false) })
}

func guardDo(tb testing.TB, p sluice.Policy) func() bool {
	g, err := sluice.New(sluice.With(p))
	setupErr(tb, err)
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	return func() bool { return g.Do(ctx, fn) == nil }
}

func sentinelCall(resource string) func() bool {
	return func() bool {
		e, blocked := sentinel.Entry(resource)
		if blocked != nil {
			return false
		}
		e.Exit()
		return true
	}
}

var sentinelBreakerOnce sync.Once

// sentinelBreaker makes sure sentinel runs, logging to a temporary
// directory, and loads an error-count breaker rule of threshold on a
// resource. Sentinel's state is global: when the limiter rows started it
// first, a second start is refused and the one running serves.
func sentinelBreaker(tb testing.TB, resource string, threshold float64) string {
	sentinelBreakerOnce.Do(func() {
		conf := sentinelconfig.NewDefaultConfig()
		conf.Sentinel.Log.Dir = os.TempDir() + "/sluice-bench-sentinel"
		if err := sentinel.InitWithConfig(conf); err != nil {
			tb.Logf("sentinel: %v", err)
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
		tb.Fatal(err)
	}
	return resource
}

// hystrixOpen configures a hystrix command and fails it until its circuit
// opens; hystrix updates its health from a metrics goroutine, so this waits
// for it, a second at most.
func hystrixOpen(tb testing.TB, name string) {
	hystrix.ConfigureCommand(name, hystrix.CommandConfig{
		Timeout: 10_000, MaxConcurrentRequests: 1024,
		RequestVolumeThreshold: 1, ErrorPercentThreshold: 1, SleepWindow: 3_600_000,
	})
	c, _, err := hystrix.GetCircuit(name)
	if err != nil {
		tb.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for !c.IsOpen() {
		if time.Now().After(deadline) {
			tb.Fatal("hystrix circuit did not open")
		}
		_ = hystrix.Do(name, func() error { return errDown }, nil)
		time.Sleep(time.Millisecond)
	}
}

// benchStart is the origin of monoNow.
var benchStart = time.Now()

// monoNow reads the monotonic clock as the policies' instants, in one
// inlined read, as a Guard does.
func monoNow() time.Duration { return time.Since(benchStart) }
