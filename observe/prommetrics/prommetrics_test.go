package prommetrics_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/observe/otelmetrics"
	"github.com/sluice-go/sluice/observe/prommetrics"
	"github.com/sluice-go/sluice/ratelimit"
)

// scrape gets h's exposition and parses it.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	require.NoError(t, err)
	return fams
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func TestScrapeShowsSluiceMetricsUnderPrometheusNames(t *testing.T) {
	metrics, handler, err := prommetrics.New(prommetrics.WithMetricsOptions(otelmetrics.WithResourceAttribute("http.route")))
	require.NoError(t, err)
	limit, err := ratelimit.NewTokenBucket(ratelimit.Every(time.Hour), 2, ratelimit.WithName("ratelimit/api"))
	require.NoError(t, err)
	br, err := breaker.New("backend", breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(time.Hour))
	require.NoError(t, err)
	clk := sluice.NewManualClock(time.Second)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(limit, br), sluice.WithClock(clk), sluice.WithObserver(metrics))
	require.NoError(t, err)
	defer g.Close()

	ctx := sluice.WithResource(t.Context(), "GET /items")
	for _, fail := range []bool{false, true, false} { // ok; a failure opens the breaker; rejected by the limiter
		_ = g.Do(ctx, func(context.Context) error {
			clk.Advance(30 * time.Millisecond)
			if fail {
				return errors.New("down")
			}
			return nil
		})
	}
	fams := scrape(t, handler)

	req := fams["sluice_requests_total"]
	require.NotNil(t, req, "families: %v", keys(fams))
	assert.Equal(t, dto.MetricType_COUNTER, req.GetType())
	got := map[string]float64{}
	for _, m := range req.GetMetric() {
		l := labels(m)
		assert.Equal(t, "api", l["sluice_guard"])
		got[l["sluice_policy"]+" "+l["sluice_result"]+" "+l["sluice_cause"]] = m.GetCounter().GetValue()
	}
	assert.Equal(t, map[string]float64{
		"ratelimit/api admitted ":             2,
		"ratelimit/api rejected rate_limited": 1,
		"breaker/backend admitted ":           2,
	}, got)

	dur := fams["sluice_call_duration_seconds"]
	require.NotNil(t, dur)
	assert.Equal(t, dto.MetricType_HISTOGRAM, dur.GetType())
	assert.Contains(t, dur.GetHelp(), "Duration")
	byOutcome := map[string]uint64{}
	for _, m := range dur.GetMetric() {
		l := labels(m)
		assert.Equal(t, "GET /items", l["http_route"])
		byOutcome[l["sluice_outcome"]+" "+l["error_type"]] = m.GetHistogram().GetSampleCount()
		assert.InDelta(t, 0.030*float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum(), 1e-9, "seconds")
	}
	assert.Equal(t, map[string]uint64{"success ": 1, "failure _OTHER": 1}, byOutcome)
	var bounds []float64
	for _, b := range dur.GetMetric()[0].GetHistogram().GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	assert.Equal(t, []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, math.Inf(1)}, bounds,
		"the buckets are in seconds, the unit the name ends with")

	state := fams["sluice_circuit_breaker_state"]
	require.NotNil(t, state)
	assert.Equal(t, dto.MetricType_GAUGE, state.GetType())
	for _, m := range state.GetMetric() {
		want := 0.0
		if labels(m)["sluice_circuit_breaker_state"] == "open" {
			want = 1
		}
		assert.Equal(t, want, m.GetGauge().GetValue(), labels(m))
	}
	trans := fams["sluice_circuit_breaker_transitions_total"]
	require.NotNil(t, trans)
	require.Len(t, trans.GetMetric(), 1)
	assert.Equal(t, "open", labels(trans.GetMetric()[0])["sluice_circuit_breaker_to"])

	lim := fams["sluice_rate_limiter_limit"]
	require.NotNil(t, lim, "families: %v", keys(fams))
	assert.Equal(t, 2.0, lim.GetMetric()[0].GetGauge().GetValue())
}

func keys(m map[string]*dto.MetricFamily) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestNewRefusesBadInput(t *testing.T) {
	_, _, err := prommetrics.New(prommetrics.WithRegistry(nil))
	assert.ErrorContains(t, err, "nil registry")
	_, _, err = prommetrics.New(nil)
	assert.ErrorContains(t, err, "nil Option")
}

// Without a resource attribute, the durations are the Guard's own
// histograms; the CPU usage given to otelmetrics.WithCPU is a gauge.
func TestScrapeShowsGuardDurationsAndCPU(t *testing.T) {
	metrics, handler, err := prommetrics.New(prommetrics.WithMetricsOptions(otelmetrics.WithCPU(func() float64 { return 0.25 })))
	require.NoError(t, err)
	clk := sluice.NewManualClock(time.Second)
	g, err := sluice.New(sluice.WithName("api"), sluice.WithClock(clk), sluice.WithObserver(metrics))
	require.NoError(t, err)
	defer g.Close()
	for _, d := range []time.Duration{time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond} {
		_ = g.Do(t.Context(), func(context.Context) error { clk.Advance(d); return nil })
	}
	_ = g.Do(t.Context(), func(context.Context) error { clk.Advance(2 * time.Second); return sluice.ErrTimeout })
	fams := scrape(t, handler)

	dur := fams["sluice_call_duration_seconds"]
	require.NotNil(t, dur, "families: %v", keys(fams))
	assert.Equal(t, dto.MetricType_HISTOGRAM, dur.GetType())
	type hist struct {
		count      uint64
		sum        float64
		cumulative []uint64
	}
	got := map[string]hist{}
	for _, m := range dur.GetMetric() {
		l := labels(m)
		h := hist{count: m.GetHistogram().GetSampleCount(), sum: m.GetHistogram().GetSampleSum()}
		for _, b := range m.GetHistogram().GetBucket() {
			h.cumulative = append(h.cumulative, b.GetCumulativeCount())
		}
		got[l["sluice_outcome"]+" "+l["error_type"]] = h
	}
	require.Len(t, got, 2, "%v", got)
	ok := got["success "]
	assert.Equal(t, uint64(3), ok.count)
	assert.InDelta(t, 0.081, ok.sum, 1e-9)
	assert.Equal(t, []uint64{1, 1, 1, 1, 1, 3}, ok.cumulative[:6], "1ms in the first bucket, 40ms in (25ms, 50ms]")
	to := got["failure timeout"]
	assert.Equal(t, uint64(1), to.count)
	assert.InDelta(t, 2.0, to.sum, 1e-9)
	assert.Equal(t, uint64(0), to.cumulative[9], "2s is above the 1s bound")
	assert.Equal(t, uint64(1), to.cumulative[10])

	cpu := fams["sluice_load_cpu_utilization_ratio"]
	require.NotNil(t, cpu, "families: %v", keys(fams))
	assert.Equal(t, dto.MetricType_GAUGE, cpu.GetType())
	require.Len(t, cpu.GetMetric(), 1)
	assert.Equal(t, 0.25, cpu.GetMetric()[0].GetGauge().GetValue())
}

// Two limiters of one name in a chain (a per-second and a per-hour limit,
// both with their default name) report one series each, not two, which
// the registry would refuse, failing the whole scrape: their counts add up,
// and the gauges are the outer one's.
func TestPoliciesOfOneNameReportOneSeries(t *testing.T) {
	metrics, handler, err := prommetrics.New()
	require.NoError(t, err)
	perSecond, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10)
	require.NoError(t, err)
	perHour, err := ratelimit.NewTokenBucket(ratelimit.Every(time.Hour), 100)
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(perSecond, perHour), sluice.WithObserver(metrics))
	require.NoError(t, err)
	defer g.Close()
	require.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))

	fams := scrape(t, handler)
	got := map[string]float64{}
	for _, name := range []string{"sluice_requests_total", "sluice_rate_limiter_limit", "sluice_rate_limiter_remaining"} {
		fam := fams[name]
		require.NotNil(t, fam, "families: %v", keys(fams))
		for _, m := range fam.GetMetric() {
			l := labels(m)
			v := m.GetGauge().GetValue()
			if fam.GetType() == dto.MetricType_COUNTER {
				v = m.GetCounter().GetValue()
			}
			got[name+" "+l["sluice_policy"]+" "+l["sluice_result"]] = v
		}
	}
	assert.Equal(t, map[string]float64{
		"sluice_requests_total ratelimit/token-bucket admitted": 2, // one a policy
		"sluice_rate_limiter_limit ratelimit/token-bucket ":     10,
		"sluice_rate_limiter_remaining ratelimit/token-bucket ": 9,
	}, got)
}
