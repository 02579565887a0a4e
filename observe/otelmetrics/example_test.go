package otelmetrics_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/observe/otelmetrics"
)

func ExampleNew() {
	metrics, err := otelmetrics.New()
	if err != nil {
		panic(err)
	}
	// In production, a periodic reader: sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithProducer(metrics)).
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(metrics))
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	g, err := sluice.New(sluice.WithName("payments"), sluice.WithObserver(metrics))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	defer provider.Shutdown(context.Background())

	_ = g.Do(context.Background(), func(context.Context) error { return nil })
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		fmt.Println(m.Name)
	}
	// Output:
	// sluice.call.duration
}
