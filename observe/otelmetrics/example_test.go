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
	reader := sdkmetric.NewManualReader() // in production: a periodic OTLP reader
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	metrics, err := otelmetrics.New(provider)
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.WithName("payments"), sluice.WithObserver(metrics))
	if err != nil {
		panic(err)
	}
	defer g.Close()

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
