package bench

import (
	"context"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/bulkhead"

	"github.com/sluice-go/sluice"
)

// nopPolicy admits everything: what is measured is the chain itself.
type nopPolicy struct{}

func (nopPolicy) Name() string { return "nop" }
func (nopPolicy) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1}, nil
}
func (nopPolicy) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (nopPolicy) Needs() sluice.Needs                                              { return 0 }

// BenchmarkGuardOverhead compares the cost of running a call through the
// composition layer of each library, with one policy that never rejects: a
// sluice Guard with a no-op policy, and a failsafe-go executor with a bulkhead
// far above the concurrency of the run.
func BenchmarkGuardOverhead(b *testing.B) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	for _, c := range []struct {
		name string
		p    sluice.Policy
	}{{"sluice", nopPolicy{}}} {
		g, err := sluice.New(sluice.With(c.p))
		if err != nil {
			b.Fatal(err)
		}
		run(b, c.name, func() { _ = g.Do(ctx, fn) })
	}

	ex := failsafe.With[any](bulkhead.New[any](1 << 20))
	ffn := func() error { return nil }
	run(b, "failsafe-go", func() { _ = ex.Run(ffn) })
}

// run benchmarks op serially and in parallel, with allocations reported.
func run(b *testing.B, name string, op func()) {
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

// TestGuardOverheadRuns keeps the benchmark's set-up honest in `go test`.
func TestGuardOverheadRuns(t *testing.T) {
	g, err := sluice.New(sluice.With(nopPolicy{}))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	if err := g.Do(context.Background(), func(context.Context) error { calls++; return nil }); err != nil || calls != 1 {
		t.Fatalf("Do: err %v, calls %d", err, calls)
	}
}
