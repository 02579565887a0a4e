package otelmetrics_test

import (
	"fmt"

	"context"
	"github.com/sluice-go/sluice/observe/otelmetrics"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/ratelimit"
)

// A rules reload that rebuilds a Guard detaches the old one and makes its
// successor, and the old one serves on until the new rules are in force: a
// collection in that window, finding the old Guard with nothing in flight,
// does not let it go, and the calls it serves next are counted.
func TestCallsOfARebuiltGuardServingOnAreCounted(t *testing.T) {
	metrics, reader := newReader(t)
	limit, err := ratelimit.NewFixedWindow(100, time.Minute, ratelimit.WithName("limit"))
	if err != nil {
		t.Fatal(err)
	}
	mk := func() *sluice.Guard {
		g, err := sluice.New(sluice.WithName("api"), sluice.With(limit), sluice.WithObserver(metrics))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	ok := func(context.Context) error { return nil }
	old := mk()
	_ = old.Do(t.Context(), ok)

	// The loader: Detach the old Guard, make the successor...
	guardhook.Detach(old)
	_ = mk()
	// ...a scrape comes in while the load goes on...
	points(t, reader, "sluice.requests")
	// ...and the old Guard still serves, until the new rules are swapped in.
	_ = old.Do(t.Context(), ok)
	_ = old.Do(t.Context(), ok)

	got := points(t, reader, "sluice.requests")["sluice.guard=api,sluice.policy=limit,sluice.result=admitted"]
	if got != 3 {
		t.Errorf("sluice.requests admitted = %v, want 3: the calls the old Guard served after the collection are lost", got)
	}
}

// At most MaxResources resources per Guard name, also when a predecessor
// serves on (the reload window) and adds more after its successor was
// attached: the two share the bound, not twice it.
func TestResourcesOfARebuiltGuardStayWithinMaxResources(t *testing.T) {
	metrics, reader := newReader(t, otelmetrics.WithResourceAttribute("http.route"))
	mk := func() *sluice.Guard {
		g, err := sluice.New(sluice.WithName("api"), sluice.WithObserver(metrics))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	ok := func(context.Context) error { return nil }
	old := mk()
	guardhook.Detach(old)
	succ := mk()
	for i := range otelmetrics.MaxResources {
		_ = old.Do(sluice.WithResource(t.Context(), fmt.Sprintf("/old/%d", i)), ok)
		_ = succ.Do(sluice.WithResource(t.Context(), fmt.Sprintf("/new/%d", i)), ok)
	}
	routes := map[string]bool{}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, isH := m.Data.(metricdata.Histogram[float64]); isH && m.Name == "sluice.call.duration" {
				for _, p := range h.DataPoints {
					if v, has := p.Attributes.Value("http.route"); has {
						routes[v.AsString()] = true
					}
				}
			}
		}
	}
	if len(routes) > otelmetrics.MaxResources+1 {
		t.Errorf("Guard api reports %d http.route values, more than MaxResources (%d) and _OTHER", len(routes), otelmetrics.MaxResources)
	}
}
