package prommetrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/observe/otelmetrics"
	"github.com/sluice-go/sluice/observe/prommetrics"
)

// A resource attribute key Prometheus cannot carry, made only of
// characters it replaces ("_", "-", "é") or not UTF-8, is an error at
// construction, not a scrape of every Guard answering 500.
func TestAResourceAttributeKeyPrometheusCannotCarryIsRefused(t *testing.T) {
	for _, key := range []string{"_", "-", "é", "route\xff"[5:]} {
		metrics, handler, err := prommetrics.New(prommetrics.WithMetricsOptions(otelmetrics.WithResourceAttribute(key)))
		if err != nil {
			continue // refused at construction: what the doc promises
		}
		g, err := sluice.New(sluice.WithName("api"), sluice.WithObserver(metrics))
		if err != nil {
			t.Fatal(err)
		}
		_ = g.Do(sluice.WithResource(t.Context(), "/items"), func(context.Context) error { return nil })
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			t.Errorf("WithResourceAttribute(%q) was accepted, and every scrape now answers %d: %.200s", key, rec.Code, rec.Body.String())
		}
		_ = g.Close()
	}
}

// Prometheus treats a label with an empty value as no label at all: a call
// whose resource is "" counts as one with no resource, not in a second
// series that a scrape would show twice.
func TestAnEmptyResourceIsNone(t *testing.T) {
	g, handler := resourceGuard(t, "http.route")
	_ = g.Do(sluice.WithResource(t.Context(), ""), func(context.Context) error { return nil })
	_ = g.Do(t.Context(), func(context.Context) error { return nil })

	fams := scrape(t, handler)
	for name, fam := range fams {
		seen := map[string]bool{}
		for _, m := range fam.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				if l.GetValue() != "" { // as Prometheus reads a label
					ls = append(ls, l.GetName()+"="+l.GetValue())
				}
			}
			sort.Strings(ls)
			id := strings.Join(ls, ",")
			if seen[id] {
				t.Errorf("%s: the series {%s} is exposed twice (one of them with an empty resource label)", name, id)
			}
			seen[id] = true
		}
	}
}

// A call's resource is a label (WithResourceAttribute: sluice.call.duration
// by rpc.method or http.route), and it comes from the traffic (a gRPC
// method off the wire, a Transport's host): one that is not UTF-8 must not
// fail every scrape, for every Guard.
func TestAnInvalidUTF8ResourceKeepsTheScrape(t *testing.T) {
	g, handler := resourceGuard(t, "rpc.method")
	_ = g.Do(sluice.WithResource(t.Context(), "/pkg.Svc/Get"), func(context.Context) error { return nil })
	_ = g.Do(sluice.WithResource(t.Context(), "/pkg.Svc/\xffGet"), func(context.Context) error { return nil })
	scrape(t, handler) // answers 200, and parses
}

// resourceGuard returns a Guard named api observed by Prometheus metrics
// that report each call's resource under key, and the scrape handler.
func resourceGuard(t *testing.T, key string) (*sluice.Guard, http.Handler) {
	t.Helper()
	metrics, handler, err := prommetrics.New(prommetrics.WithMetricsOptions(otelmetrics.WithResourceAttribute(key)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := sluice.New(sluice.WithName("api"), sluice.WithObserver(metrics))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g, handler
}
