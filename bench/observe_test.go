package bench

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/observe/otelmetrics"
	"github.com/sluice-go/sluice/ratelimit"
)

// observedGuard builds a Guard of a token bucket and a breaker (of the
// token bucket alone, without breaker), reported on the OpenTelemetry SDK
// through otelmetrics when observed.
func observedGuard(tb testing.TB, observed bool, breakerToo ...bool) *sluice.Guard {
	l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1e9), 1e9)
	if err != nil {
		tb.Fatal(err)
	}
	policies := []sluice.Policy{l}
	if len(breakerToo) == 0 || breakerToo[0] {
		br, err := breaker.New("dep")
		if err != nil {
			tb.Fatal(err)
		}
		policies = append(policies, br)
	}
	opts := []sluice.Option{sluice.With(policies...)}
	if observed {
		m, err := otelmetrics.New()
		if err != nil {
			tb.Fatal(err)
		}
		provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader(sdkmetric.WithProducer(m))))
		tb.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
		opts = append(opts, sluice.WithName("dep"), sluice.WithObserver(m))
	}
	g, err := sluice.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = g.Close() })
	return g
}

// BenchmarkGuardObserved is the same Guard unobserved and observed with
// OpenTelemetry's SDK, side by side; run it with -count and compare with
// benchstat, the two alternate within each count.
func BenchmarkGuardObserved(b *testing.B) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	for _, observed := range []bool{false, true} {
		g := observedGuard(b, observed)
		name := "unobserved"
		if observed {
			name = "otel"
		}
		run(b, name, func() { _ = g.Do(ctx, fn) })
	}
}

// Observation with OpenTelemetry's SDK allocates nothing per call.
func TestObservedGuardAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	for _, observed := range []bool{false, true} {
		g := observedGuard(t, observed)
		_ = g.Do(ctx, fn) // the first call builds the SDK's series
		if n := testing.AllocsPerRun(1000, func() { _ = g.Do(ctx, fn) }); n != 0 {
			t.Errorf("observed %v: %v allocations per call, want 0", observed, n)
		}
	}
}

// BenchmarkGuardObservedOverhead runs the unobserved and the observed
// Guard in alternate batches of 256 calls within one loop, so that a
// machine whose load changes during the run slows both alike, and reports
// the observed Guard's time per call over the unobserved one's
// (observed/unobserved) besides the ns/op of a pair of calls. It does so
// for a token bucket and a breaker, and for the token bucket alone: in
// both, an unobserved Guard reads the clock once a call and an observed
// one twice (for the call's duration).
func BenchmarkGuardObservedOverhead(b *testing.B) {
	for _, c := range []struct {
		name    string
		breaker bool
	}{{"limiter+breaker", true}, {"limiter", false}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			fn := func(context.Context) error { return nil }
			unobserved, observed := observedGuard(b, false, c.breaker), observedGuard(b, true, c.breaker)
			const batch = 256
			spent := alternate(b, batch, func() { _ = unobserved.Do(ctx, fn) }, func() { _ = observed.Do(ctx, fn) })
			b.ReportMetric(float64(spent[1])/float64(spent[0]), "observed/unobserved")
			b.ReportMetric(float64(spent[1]-spent[0])/float64(b.N*batch), "overhead-ns/call")
		})
	}
}
