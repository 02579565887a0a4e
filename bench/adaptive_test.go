package bench

import (
	"context"
	"testing"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	kratosrl "github.com/go-kratos/aegis/ratelimit"
	"github.com/go-kratos/aegis/ratelimit/bbr"
	"github.com/zeromicro/go-zero/core/load"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
)

// adaptiveOp is one admitted call, admit and done. Every row reads the
// clock as it would in a service: the peers themselves, the sluice policies
// as a Guard reads it for them (once at the admission, and once more at the
// end for a policy that needs the latency).
type adaptiveOp func() bool

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

	// The load shedder at its defaults, alone and inside a sluice.Guard.
	shed, err := adaptive.NewShedder()
	must(err)
	inShed, err := adaptive.NewShedder()
	must(err)
	chain, err := sluice.New(sluice.With(inShed))
	must(err)
	closers = append(closers, func() { _ = chain.Close() })

	bulk, err := adaptive.NewBulkhead(1 << 20)
	must(err)

	kratos := bbr.NewLimiter()
	shedder := load.NewAdaptiveShedder()
	fsBulkhead := bulkhead.New[any](1 << 20)
	fsAdaptive := adaptivelimiter.NewWithDefaults[any]()

	policy := func(p sluice.Policy) adaptiveOp {
		untimed := p.Needs()&sluice.NeedsEnd == 0
		return func() bool {
			now := monoNow()
			t, _, err := p.Admit(ctx, now)
			if err == nil {
				if untimed {
					p.Done(t, sluice.Success, now, -1)
				} else {
					end := monoNow()
					p.Done(t, sluice.Success, end, end-now)
				}
			}
			return err == nil
		}
	}
	nop := func(context.Context) error { return nil }
	ops := map[string]adaptiveOp{
		"sluice-shedder":          policy(shed),
		"sluice-shedder-in-guard": func() bool { return chain.Do(ctx, nop) == nil },
		"kratos-bbr": func() bool {
			done, err := kratos.Allow()
			if err != nil {
				return false
			}
			done(kratosrl.DoneInfo{})
			return true
		},
		"go-zero-shedder": func() bool {
			p, err := shedder.Allow()
			if err != nil {
				return false
			}
			p.Pass()
			return true
		},
		"sluice-bulkhead": policy(bulk),
		"failsafe-bulkhead": func() bool {
			if !fsBulkhead.TryAcquirePermit() {
				return false
			}
			fsBulkhead.ReleasePermit()
			return true
		},
		"failsafe-adaptivelimiter": func() bool {
			p, ok := fsAdaptive.TryAcquirePermit()
			if !ok {
				return false
			}
			p.Record()
			return true
		},
	}
	names := []string{"sluice-shedder", "sluice-shedder-in-guard", "kratos-bbr", "go-zero-shedder",
		"sluice-bulkhead", "failsafe-bulkhead", "failsafe-adaptivelimiter"}
	return names, ops, func() {
		for _, c := range closers {
			c()
		}
	}
}

// BenchmarkAdaptive compares one admitted call (admit and done) of sluice's
// load shedder and bulkhead with Kratos' BBR, go-zero's adaptive
// shedder and failsafe-go's bulkhead and adaptive limiter, serially and in
// parallel.
func BenchmarkAdaptive(b *testing.B) {
	names, ops, release := adaptiveCases(b)
	defer release()
	for _, name := range names {
		op := ops[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				op()
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					op()
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
			if !ops[name]() {
				t.Fatalf("%s: call %d rejected", name, i)
			}
		}
	}
}
