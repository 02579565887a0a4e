package otelmetrics_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	sluiceecho "github.com/sluice-go/sluice/middleware/echo"
	sluicegrpc "github.com/sluice-go/sluice/middleware/grpc"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/observe/otelmetrics"
	"github.com/sluice-go/sluice/ratelimit"
)

// setup returns a Metrics on a manual reader, and a Guard named name that
// it reports: a fixed window of 4 requests a minute before a breaker.
func setup(t *testing.T, name string) (*sdkmetric.ManualReader, *sluice.Guard) {
	t.Helper()
	m, reader := newReader(t)
	limit, err := ratelimit.NewFixedWindow(4, time.Minute, ratelimit.WithName("ratelimit/api"))
	require.NoError(t, err)
	br, err := breaker.New("backend")
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName(name), sluice.With(limit, br),
		sluice.WithClock(sluice.NewManualClock(time.Second)), sluice.WithObserver(m))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return reader, g
}

// newReader returns a Metrics made with opts, and a manual reader that
// collects it.
func newReader(t *testing.T, opts ...otelmetrics.Option) (*otelmetrics.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	m, err := otelmetrics.New(opts...)
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(m))
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	return m, reader
}

// script is the traffic every adapter carries: three successes, a failure,
// then two requests the fixed window rejects.
var script = []bool{true, true, true, false, true, true}

// points collects reader and returns, for the metric name, each data
// point's value (a sum's, a gauge's, or a histogram's count) by its
// attributes, written as "k=v,k=v" in the order of the set.
func points(t *testing.T, reader *sdkmetric.ManualReader, name string) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[key(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[key(p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(p.Attributes)] = float64(p.Count)
				}
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
		}
	}
	return out
}

// key writes an attribute set as "k=v,k=v", in the order of the set.
func key(s attribute.Set) string {
	k := ""
	for _, kv := range s.ToSlice() {
		if k != "" {
			k += ","
		}
		k += string(kv.Key) + "=" + kv.Value.String()
	}
	return k
}

// runDo, runHTTP, runEcho and runGRPC carry the script through Do, the
// net/http middleware, the Echo middleware and the gRPC unary server
// interceptor.
func runDo(t *testing.T, g *sluice.Guard) {
	for _, ok := range script {
		_ = g.Do(t.Context(), func(context.Context) error {
			if !ok {
				return errors.New("backend down")
			}
			return nil
		})
	}
}

func runHTTP(t *testing.T, g *sluice.Guard) {
	mw, err := sluicehttp.Middleware(sluicehttp.WithGuard(g))
	require.NoError(t, err)
	for _, ok := range script {
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if !ok {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/items", nil))
	}
}

func runEcho(t *testing.T, g *sluice.Guard) {
	mw, err := sluiceecho.Middleware(sluiceecho.WithGuard(g))
	require.NoError(t, err)
	for _, ok := range script {
		e := echo.New()
		e.Use(mw)
		e.GET("/items", func(c echo.Context) error {
			if !ok {
				return echo.NewHTTPError(http.StatusInternalServerError)
			}
			return c.NoContent(http.StatusOK)
		})
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/items", nil))
	}
}

func runGRPC(t *testing.T, g *sluice.Guard) {
	icpt, err := sluicegrpc.UnaryServerInterceptor(sluicegrpc.WithGuard(g))
	require.NoError(t, err)
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.Items/List"}
	for _, ok := range script {
		_, _ = icpt(t.Context(), "req", info, func(context.Context, any) (any, error) {
			if !ok {
				return nil, status.Error(codes.Internal, "backend down")
			}
			return "resp", nil
		})
	}
}

func TestEveryEntryPointCountsTheSameScriptAlike(t *testing.T) {
	for name, run := range map[string]func(*testing.T, *sluice.Guard){
		"Do": runDo, "net/http": runHTTP, "echo": runEcho, "grpc": runGRPC,
	} {
		t.Run(name, func(t *testing.T) {
			reader, g := setup(t, "api")
			run(t, g)

			assert.Equal(t, map[string]float64{
				"sluice.guard=api,sluice.policy=ratelimit/api,sluice.result=admitted":                           4,
				"sluice.cause=rate_limited,sluice.guard=api,sluice.policy=ratelimit/api,sluice.result=rejected": 2,
				"sluice.guard=api,sluice.policy=breaker/backend,sluice.result=admitted":                         4,
			}, points(t, reader, "sluice.requests"))
			assert.Equal(t, map[string]float64{
				"sluice.guard=api,sluice.outcome=success":                   3,
				"error.type=_OTHER,sluice.guard=api,sluice.outcome=failure": 1,
			}, points(t, reader, "sluice.call.duration"))
			assert.Equal(t, map[string]float64{
				"sluice.circuit_breaker.state=closed,sluice.guard=api,sluice.policy=breaker/backend":    1,
				"sluice.circuit_breaker.state=open,sluice.guard=api,sluice.policy=breaker/backend":      0,
				"sluice.circuit_breaker.state=half_open,sluice.guard=api,sluice.policy=breaker/backend": 0,
			}, points(t, reader, "sluice.circuit_breaker.state"))
			assert.Equal(t, map[string]float64{
				"sluice.guard=api,sluice.policy=breaker/backend": 0.25,
			}, points(t, reader, "sluice.circuit_breaker.failure_ratio"))
		})
	}
}

func TestBreakerTransitionsAndFallbacksAreCounted(t *testing.T) {
	m, reader := newReader(t)
	br, err := breaker.New("backend", breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(time.Minute))
	require.NoError(t, err)
	fb := fallback{}
	g, err := sluice.New(sluice.WithName("api"), sluice.With(br), sluice.WithObserver(m), sluice.WithFallback(fb))
	require.NoError(t, err)
	defer g.Close()
	for range 4 { // two failures open the breaker; two rejections answered by the fallback
		_ = g.Do(t.Context(), func(context.Context) error { return errors.New("down") })
	}
	assert.Equal(t, map[string]float64{
		"sluice.circuit_breaker.from=closed,sluice.circuit_breaker.to=open,sluice.guard=api,sluice.policy=breaker/backend": 1,
	}, points(t, reader, "sluice.circuit_breaker.transitions"))
	assert.Equal(t, map[string]float64{"sluice.cause=circuit_open,sluice.guard=api": 2},
		points(t, reader, "sluice.fallback.invocations"))
	assert.Equal(t, float64(1),
		points(t, reader, "sluice.circuit_breaker.state")["sluice.circuit_breaker.state=open,sluice.guard=api,sluice.policy=breaker/backend"])
}

func TestRetriesAreCounted(t *testing.T) {
	m, reader := newReader(t)
	g, err := sluice.New(sluice.WithName("api"), sluice.WithObserver(m),
		sluice.WithRetry(sluice.Retry{Attempts: 2, Backoff: time.Microsecond, MinPerSecond: 1}))
	require.NoError(t, err)
	defer g.Close()
	for range 3 { // the budget starts with one retry: the first call's
		_ = g.Do(t.Context(), func(context.Context) error { return errors.New("down") })
	}
	for name, want := range map[string]float64{"sluice.retry.attempts": 4, "sluice.retry.retries": 1, "sluice.retry.budget_refusals": 2} {
		assert.Equal(t, map[string]float64{"sluice.guard=api": want}, points(t, reader, name), name)
	}
	// A Guard that does not retry has no retry series.
	plain, err := sluice.New(sluice.WithName("plain"), sluice.WithObserver(m))
	require.NoError(t, err)
	defer plain.Close()
	_ = plain.Do(t.Context(), func(context.Context) error { return errors.New("down") })
	assert.NotContains(t, points(t, reader, "sluice.retry.attempts"), "sluice.guard=plain")
}

// fallback answers a circuit-open rejection with success.
type fallback struct{}

func (fallback) Declared(_ context.Context, err error) (string, bool) {
	return "circuit-open", errors.Is(err, sluice.ErrCircuitOpen)
}

func (f fallback) Answer(ctx context.Context, err error) (string, error) {
	if name, ok := f.Declared(ctx, err); ok {
		return name, nil
	}
	return "", err
}

// A limiter and a breaker group keyed by client see 100,000 keys, each
// key's breaker opening: the series do not move.
func TestKeysNeverBecomeAttributes(t *testing.T) {
	m, reader := newReader(t, otelmetrics.WithResourceAttribute("http.route"))
	perKey, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewFixedWindow(1, time.Hour)
	}, ratelimit.WithName("ratelimit/per-client"))
	require.NoError(t, err)
	clk := sluice.NewManualClock(time.Second) // no breaker's open time ends
	perClient, err := breaker.NewGroup("per-client", breaker.WithConsecutiveFailures(1), breaker.WithMaxBreakers(64),
		breaker.WithKeyFunc(func(ctx context.Context) string { k, _ := sluice.KeyFrom(ctx); return k }), breaker.WithClock(clk))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(perKey, perClient), sluice.WithClock(clk), sluice.WithObserver(m))
	require.NoError(t, err)
	defer g.Close()

	series := func() int {
		n := 0
		for _, name := range []string{"sluice.requests", "sluice.call.duration", "sluice.circuit_breaker.transitions",
			"sluice.rate_limiter.keys", "sluice.fallback.invocations", "sluice.wait.duration"} {
			n += len(points(t, reader, name))
		}
		return n
	}
	// Per client: a failed call, then a rejection by its spent window.
	call := func(key string) {
		ctx := sluice.WithKey(sluice.WithResource(t.Context(), "GET /items"), key)
		_ = g.Do(ctx, func(context.Context) error { return errors.New("down") })
		_ = g.Do(ctx, func(context.Context) error { return nil })
	}
	// The warm-up's 100 keys fill the Group with 64 open breakers, then
	// open its overflow breaker, which rejects the keys after them: every
	// series the test can reach is there.
	for i := range 100 {
		call(fmt.Sprintf("warm-up-%d", i))
	}
	before := series()
	require.NotZero(t, before)
	for i := range 100_000 {
		call(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
	}
	assert.Equal(t, before, series(), "100,000 keys add no series")
	assert.Equal(t, map[string]float64{
		"sluice.circuit_breaker.from=closed,sluice.circuit_breaker.to=open,sluice.guard=api,sluice.policy=breaker/per-client": 65,
	}, points(t, reader, "sluice.circuit_breaker.transitions"), "64 breakers and the overflow one opened, under the Group's name")
	assert.Equal(t, float64(2*100_100), points(t, reader, "sluice.requests")["sluice.guard=api,sluice.policy=ratelimit/per-client,sluice.result=admitted"]+
		points(t, reader, "sluice.requests")["sluice.cause=rate_limited,sluice.guard=api,sluice.policy=ratelimit/per-client,sluice.result=rejected"])
}

func TestNewAndAttachRefuseBadInput(t *testing.T) {
	_, err := otelmetrics.New(nil)
	assert.ErrorContains(t, err, "nil Option")
	_, err = otelmetrics.New(otelmetrics.WithResourceAttribute(""))
	assert.ErrorContains(t, err, "empty key")
	// The route would replace the Guard's name or the outcome (two
	// Guards' series become one, and a Prometheus scrape fails), or a
	// histogram would carry two le labels.
	for _, key := range []string{"sluice.guard", "sluice.outcome", "sluice_policy", "error.type", "le", "quantile", "__name__",
		"error..type", "error__type", "error._type", "sluice..guard"} { // a run of replaced characters is one underscore
		_, err = otelmetrics.New(otelmetrics.WithResourceAttribute(key))
		assert.ErrorContains(t, err, "WithResourceAttribute", key)
	}
	for _, key := range []string{"http.route", "rpc.method", "route"} {
		_, err = otelmetrics.New(otelmetrics.WithResourceAttribute(key))
		assert.NoError(t, err, key)
	}
	_, err = otelmetrics.New(otelmetrics.WithCPU(nil))
	assert.ErrorContains(t, err, "WithCPU: nil function")
	m, err := otelmetrics.New()
	require.NoError(t, err)
	_, err = sluice.New(sluice.WithObserver(m))
	assert.ErrorContains(t, err, "sluice.WithName")
	g, err := sluice.New(sluice.WithName("a"), sluice.WithObserver(m))
	require.NoError(t, err)
	_, err = sluice.New(sluice.WithName("a"), sluice.WithObserver(m))
	assert.ErrorContains(t, err, `"a" is reported already`)
	require.NoError(t, g.Close())
	g, err = sluice.New(sluice.WithName("a"), sluice.WithObserver(m))
	require.NoError(t, err, "a closed Guard's name is free again")
	require.NoError(t, g.Close())
}

func TestShadowRejectionsAreCountedApart(t *testing.T) {
	reader, g := setup(t, "api")
	require.NoError(t, g.SetShadow("ratelimit/api", true))
	runDo(t, g)
	assert.Equal(t, map[string]float64{
		"sluice.guard=api,sluice.policy=ratelimit/api,sluice.result=admitted":        4,
		"sluice.guard=api,sluice.policy=ratelimit/api,sluice.result=shadow_rejected": 2,
		"sluice.guard=api,sluice.policy=breaker/backend,sluice.result=admitted":      6,
	}, points(t, reader, "sluice.requests"))
}

// The CPU gauge reads the function given to WithCPU at each collection,
// and is absent without one.
func TestCPUGaugeReadsTheGivenUsage(t *testing.T) {
	var usage atomic.Uint64
	_, reader := newReader(t, otelmetrics.WithCPU(func() float64 { return float64(usage.Load()) / 100 }))
	usage.Store(42)
	assert.Equal(t, map[string]float64{"": 0.42}, points(t, reader, "sluice.load.cpu.utilization"))
	usage.Store(7)
	assert.Equal(t, map[string]float64{"": 0.07}, points(t, reader, "sluice.load.cpu.utilization"))

	_, reader = newReader(t)
	assert.Empty(t, points(t, reader, "sluice.load.cpu.utilization"))
}

// rejectAll is a policy that rejects every call.
type rejectAll struct{}

func (rejectAll) Name() string { return "limit" }
func (rejectAll) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1}, sluice.ErrRateLimited
}
func (rejectAll) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (rejectAll) Needs() sluice.Needs                                              { return 0 }

// The admitted count of a policy in shadow mode is a monotonic counter
// while calls run: a snapshot that catches a call shadow rejected and not
// yet counted admitted never makes it negative, or go back.
func TestShadowAdmittedCountNeverGoesBack(t *testing.T) {
	m, reader := newReader(t)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(rejectAll{}), sluice.WithShadow("limit"), sluice.WithObserver(m))
	require.NoError(t, err)
	defer g.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_ = g.Do(context.Background(), func(context.Context) error { return nil })
			}
		})
	}
	const admitted = "sluice.guard=api,sluice.policy=limit,sluice.result=admitted"
	last := 0.0
	for range 300 {
		v := points(t, reader, "sluice.requests")[admitted]
		if v < last {
			t.Errorf("admitted went from %v to %v", last, v)
			break
		}
		last = v
	}
	cancel()
	wg.Wait()
}
