package prommetrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/observe/otelmetrics"
	"github.com/sluice-go/sluice/observe/prommetrics"
)

// A call's resource is a label (WithResourceAttribute: sluice.call.duration
// by rpc.method or http.route), and it comes from the traffic (a gRPC
// method off the wire, a Transport's host): one that is not UTF-8 must not
// fail every scrape, for every Guard.
func TestAnInvalidUTF8ResourceKeepsTheScrape(t *testing.T) {
	metrics, handler, err := prommetrics.New(prommetrics.WithMetricsOptions(otelmetrics.WithResourceAttribute("rpc.method")))
	if err != nil {
		t.Fatal(err)
	}
	g, err := sluice.New(sluice.WithName("api"), sluice.WithObserver(metrics))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_ = g.Do(sluice.WithResource(t.Context(), "/pkg.Svc/Get"), func(context.Context) error { return nil })
	_ = g.Do(sluice.WithResource(t.Context(), "/pkg.Svc/\xffGet"), func(context.Context) error { return nil })
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("scrape answered %d after one call whose resource is not UTF-8: %.300s", rec.Code, rec.Body.String())
	}
}
