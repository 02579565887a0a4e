// Package prommetrics serves sluice's metrics to Prometheus: one call gives
// the Observer to hand to each Guard and the /metrics handler to mount.
//
//	metrics, handler, _ := prommetrics.New()
//	mux.Handle("GET /metrics", handler)
//	g, _ := sluice.New(sluice.WithName("payments"), sluice.With(limit), sluice.WithObserver(metrics))
//
// The metrics are those of package otelmetrics, exported through
// OpenTelemetry's Prometheus exporter rather than collected a second time
// by a client_golang collector: one set of instruments serves both worlds,
// a service that already runs an OpenTelemetry pipeline sees the same
// series under the same attributes, and the exporter's translation gives
// Prometheus its own conventions: dots become underscores, units and
// _total become suffixes (sluice_requests_total,
// sluice_call_duration_seconds, sluice_circuit_breaker_state, ...).
//
// The handler serves its own registry, not Prometheus's default one, so
// that two of them in one process (in tests, say) do not collide; mount a
// service's other collectors on a handler of their own, or give New your
// registry with [WithRegistry].
package prommetrics

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluice-go/sluice/observe/otelmetrics"
)

// Option configures New.
type Option func(*config) error

type config struct {
	reg     *prometheus.Registry
	metrics []otelmetrics.Option
}

// WithRegistry registers sluice's metrics on reg, which the handler then
// serves whole, instead of on a registry of their own. reg must not be nil.
func WithRegistry(reg *prometheus.Registry) Option {
	return func(c *config) error {
		if reg == nil {
			return errors.New("prommetrics: WithRegistry: nil registry")
		}
		c.reg = reg
		return nil
	}
}

// WithMetricsOptions passes opts to otelmetrics.New: to report each call's
// route as http.route, say (otelmetrics.WithResourceAttribute).
func WithMetricsOptions(opts ...otelmetrics.Option) Option {
	return func(c *config) error {
		c.metrics = append(c.metrics, opts...)
		return nil
	}
}

// New returns the Observer to give each Guard (sluice.WithObserver) and the
// handler that serves their metrics in the Prometheus exposition format.
func New(opts ...Option) (*otelmetrics.Metrics, http.Handler, error) {
	c := config{}
	for _, o := range opts {
		if o == nil {
			return nil, nil, errors.New("prommetrics: nil Option")
		}
		if err := o(&c); err != nil {
			return nil, nil, err
		}
	}
	if c.reg == nil {
		c.reg = prometheus.NewRegistry()
	}
	m, err := otelmetrics.New(c.metrics...)
	if err != nil {
		return nil, nil, err
	}
	exporter, err := otelprom.New(otelprom.WithRegisterer(c.reg), otelprom.WithProducer(m),
		otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("prommetrics: %w", err)
	}
	// The exporter collects only once a MeterProvider holds it; the
	// provider has no instruments of its own.
	sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	return m, promhttp.HandlerFor(c.reg, promhttp.HandlerOpts{}), nil
}
