package otelmetrics_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/observe/otelmetrics"
	"github.com/sluice-go/sluice/ratelimit"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
)

var _ sdkmetric.Producer = (*otelmetrics.Metrics)(nil)

// histogram collects reader and returns the point of the histogram name
// whose attributes are attrs ("k=v,k=v", as points writes them).
func histogram(t *testing.T, reader *sdkmetric.ManualReader, name, attrs string) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, otelmetrics.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			require.True(t, ok, "%s is a %T", name, m.Data)
			assert.Equal(t, metricdata.CumulativeTemporality, h.Temporality)
			assert.Equal(t, "s", m.Unit)
			for _, p := range h.DataPoints {
				if key(p.Attributes) == attrs {
					return p
				}
			}
		}
	}
	t.Fatalf("no %s point with %s", name, attrs)
	return metricdata.HistogramDataPoint[float64]{}
}

// Latencies fall in the buckets whose upper bound they do not pass, and
// the sum is theirs, exactly.
func TestCallDurationsFillTheBuckets(t *testing.T) {
	m, reader := newReader(t)
	clk := sluice.NewManualClock(time.Second)
	g, err := sluice.New(sluice.WithName("api"), sluice.WithClock(clk), sluice.WithObserver(m))
	require.NoError(t, err)
	defer g.Close()
	for _, d := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 20 * time.Millisecond, 2 * time.Second, 2 * time.Minute} {
		_ = g.Do(t.Context(), func(context.Context) error { clk.Advance(d); return nil })
	}
	_ = g.Do(t.Context(), func(context.Context) error {
		clk.Advance(7 * time.Millisecond)
		return errors.New("down")
	})

	p := histogram(t, reader, "sluice.call.duration", "sluice.guard=api,sluice.outcome=success")
	assert.Equal(t, []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}, p.Bounds)
	//                            ≤1ms ≤2.5 ≤5 ≤10 ≤25 ≤50 ≤.1 ≤.25 ≤.5 ≤1 ≤2.5 ≤5 ≤10 ≤30 ≤60 more
	assert.Equal(t, []uint64{2, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, p.BucketCounts)
	assert.Equal(t, uint64(6), p.Count)
	assert.InDelta(t, 122.024, p.Sum, 1e-9)
	p = histogram(t, reader, "sluice.call.duration", "error.type=_OTHER,sluice.guard=api,sluice.outcome=failure")
	assert.Equal(t, uint64(1), p.Count)
	assert.Equal(t, uint64(1), p.BucketCounts[3])
	assert.InDelta(t, 0.007, p.Sum, 1e-12)
}

// bubbleClock reads the time of the synctest bubble it was made in.
type bubbleClock struct{ t0 time.Time }

func (c bubbleClock) Now() time.Duration { return time.Since(c.t0) }

// A shaper's waits are counted in sluice.wait.duration.
func TestWaitsAreCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, reader := newReader(t)
		clk := bubbleClock{time.Now()}
		shaper, err := ratelimit.NewShaper(ratelimit.Every(100*time.Millisecond), 150*time.Millisecond,
			ratelimit.WithName("shaper"))
		require.NoError(t, err)
		g, err := sluice.New(sluice.WithName("api"), sluice.With(shaper), sluice.WithClock(clk), sluice.WithObserver(m))
		require.NoError(t, err)
		defer g.Close()
		// Of four calls at once, the first passes at once and the second
		// waits 100 ms for its turn; the others' turns, 200 and 300 ms
		// away, are beyond the 150 ms a call may wait.
		results := make(chan error, 4)
		for range 4 {
			go func() { results <- g.Do(context.Background(), func(context.Context) error { return nil }) }()
		}
		var rejected int
		for range 4 {
			if err := <-results; errors.Is(err, sluice.ErrRateLimited) {
				rejected++
			}
		}
		require.Equal(t, 2, rejected)
		p := histogram(t, reader, "sluice.wait.duration", "sluice.guard=api,sluice.result=admitted")
		assert.Equal(t, uint64(1), p.Count)
		assert.InDelta(t, 0.1, p.Sum, 1e-9)
		assert.Equal(t, uint64(1), p.BucketCounts[6], "in (50 ms, 100 ms]")
	})
}

// sluice.rate_limiter.keys counts a keyed limiter's keys and a breaker
// group's breakers.
func TestKeysOfKeyedLimitersAndBreakerGroups(t *testing.T) {
	m, reader := newReader(t)
	perKey, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewFixedWindow(10, time.Hour)
	}, ratelimit.WithName("ratelimit/per-client"))
	require.NoError(t, err)
	group, err := breaker.NewGroup("per-host")
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(perKey, group), sluice.WithObserver(m))
	require.NoError(t, err)
	defer g.Close()
	for _, kr := range [][2]string{{"a", "x"}, {"b", "x"}, {"c", "y"}, {"a", "y"}} {
		ctx := sluice.WithResource(sluice.WithKey(t.Context(), kr[0]), kr[1])
		require.NoError(t, g.Do(ctx, func(context.Context) error { return nil }))
	}
	assert.Equal(t, map[string]float64{
		"sluice.guard=api,sluice.policy=ratelimit/per-client": 3,
		"sluice.guard=api,sluice.policy=breaker/per-host":     2,
	}, points(t, reader, "sluice.rate_limiter.keys"))
}

// hangUp listens on loopback and closes every connection it accepts,
// until the test ends.
func hangUp(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// A Redis limiter whose Redis does not answer reports its errors and its
// failure policy's decisions: a timeout where nobody listens (the client
// dials again until the limiter's deadline), another error where the
// connection is closed at once.
func TestRedisErrorsAndFailurePolicyDecisions(t *testing.T) {
	m, reader := newReader(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	nobody := ln.Addr().String()
	require.NoError(t, ln.Close())
	limiter := func(addr, name string, opts ...redislimit.Option) *redislimit.Limiter {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = client.Close() })
		l, err := redislimit.NewGCRA(client, ratelimit.PerSecond(10), 10, append(opts, redislimit.WithName(name),
			redislimit.WithBreaker(100, time.Minute), redislimit.WithObserver(m.ObserveRedis))...)
		require.NoError(t, err)
		return l
	}
	for _, c := range []struct {
		l *redislimit.Limiter
		n int
	}{
		{limiter(nobody, "redis/open"), 3},
		{limiter(nobody, "redis/closed", redislimit.WithFailClosed()), 2},
		{limiter(hangUp(t), "redis/hung-up"), 1},
	} {
		g, err := sluice.New(sluice.With(c.l))
		require.NoError(t, err)
		for range c.n {
			_ = g.Do(sluice.WithKey(t.Context(), "user"), func(context.Context) error { return nil })
		}
		require.NoError(t, g.Close())
	}
	assert.Equal(t, map[string]float64{
		"error.type=timeout,sluice.policy=redis/open":   3,
		"error.type=timeout,sluice.policy=redis/closed": 2,
		"error.type=_OTHER,sluice.policy=redis/hung-up": 1,
	}, points(t, reader, "sluice.redis.errors"))
	assert.Equal(t, map[string]float64{
		"sluice.policy=redis/open,sluice.result=admitted":    3,
		"sluice.policy=redis/closed,sluice.result=rejected":  2,
		"sluice.policy=redis/hung-up,sluice.result=admitted": 1,
	}, points(t, reader, "sluice.redis.failure_policy.decisions"))
}

// Past MaxResources, the calls of further resources are counted under
// "_OTHER": a resource taken from a path cannot grow the series.
func TestResourcesPastTheMostAreOther(t *testing.T) {
	m, reader := newReader(t, otelmetrics.WithResourceAttribute("http.route"))
	g, err := sluice.New(sluice.WithName("api"), sluice.WithObserver(m))
	require.NoError(t, err)
	defer g.Close()
	for i := range otelmetrics.MaxResources + 100 {
		ctx := sluice.WithResource(t.Context(), fmt.Sprintf("GET /items/%d", i))
		require.NoError(t, g.Do(ctx, func(context.Context) error { return nil }))
	}
	require.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil })) // no resource
	got := points(t, reader, "sluice.call.duration")
	assert.Len(t, got, otelmetrics.MaxResources+2)
	assert.Equal(t, float64(1), got["http.route=GET /items/0,sluice.guard=api,sluice.outcome=success"])
	assert.Equal(t, float64(100), got["http.route=_OTHER,sluice.guard=api,sluice.outcome=success"])
	assert.Equal(t, float64(1), got["sluice.guard=api,sluice.outcome=success"])
}
