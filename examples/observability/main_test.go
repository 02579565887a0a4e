package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The example trips its limiter and its breaker, and the scrape shows both.
func TestObservabilityExample(t *testing.T) {
	var out, logs bytes.Buffer
	require.NoError(t, run(&out, slog.New(slog.NewJSONHandler(&logs, nil)), "127.0.0.1:0", nil))
	got := out.String()
	for _, want := range []string{
		`sluice_requests_total{sluice_guard="search",sluice_policy="ratelimit/search",sluice_result="admitted"} 5`,
		`sluice_requests_total{sluice_cause="rate_limited",sluice_guard="search",sluice_policy="ratelimit/search",sluice_result="rejected"} 3`,
		`sluice_requests_total{sluice_guard="pay",sluice_policy="breaker/payments",sluice_result="admitted"} 3`,
		`sluice_requests_total{sluice_cause="circuit_open",sluice_guard="pay",sluice_policy="breaker/payments",sluice_result="rejected"} 2`,
		`sluice_call_duration_seconds_count{error_type="_OTHER",http_route="GET /pay",sluice_guard="pay",sluice_outcome="failure"} 3`,
		`sluice_call_duration_seconds_count{http_route="GET /search",sluice_guard="search",sluice_outcome="success"} 5`,
		`sluice_circuit_breaker_state{sluice_circuit_breaker_state="open",sluice_guard="pay",sluice_policy="breaker/payments"} 1`,
		"  guard pay: admitted 3, rejected map[circuit-open:2]\n",
		"  guard search: admitted 5, rejected map[rate-limited:3]\n",
	} {
		assert.Contains(t, got, want)
	}
	assert.Equal(t, 1, strings.Count(logs.String(), `"msg":"sluice: circuit breaker opened"`), logs.String())
}

// The dashboard is valid JSON, and every metric it queries is one the
// service exposes (or, for the load guard, the CPU and the concurrency
// limit this example has none of, one the exporter names alike).
func TestGrafanaDashboardQueriesSluiceMetrics(t *testing.T) {
	raw, err := os.ReadFile("grafana-dashboard.json")
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(raw, &d))
	known := map[string]bool{}
	for _, n := range []string{"sluice_requests_total", "sluice_call_duration_seconds_bucket", "sluice_call_duration_seconds_count",
		"sluice_circuit_breaker_state", "sluice_circuit_breaker_transitions_total", "sluice_circuit_breaker_failure_ratio",
		"sluice_load_shedding", "sluice_load_cpu_utilization_ratio", "sluice_concurrency_limit", "sluice_concurrency_inflight",
		"sluice_concurrency_queued", "sluice_fallback_invocations_total", "sluice_rate_limiter_remaining",
		"sluice_rate_limiter_limit", "sluice_rate_limiter_keys"} {
		known[n] = true
	}
	names := regexp.MustCompile(`sluice_[a-z_]+`)
	require.NotEmpty(t, d.Panels)
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			for _, n := range names.FindAllString(tg.Expr, -1) {
				if strings.HasPrefix(n, "sluice_guard") || strings.HasPrefix(n, "sluice_policy") || strings.HasPrefix(n, "sluice_result") ||
					strings.HasPrefix(n, "sluice_cause") || strings.HasPrefix(n, "sluice_outcome") || n == "sluice_circuit_breaker_to" {
					continue // a label
				}
				if n == "sluice_circuit_breaker_state" {
					continue
				}
				assert.True(t, known[n], "%s: unknown metric %s", p.Title, n)
			}
		}
	}
}
