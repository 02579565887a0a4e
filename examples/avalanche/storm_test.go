//go:build !race

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/observe/dashboard"
)

// TestAvalancheRetryStorm plays a shortened retry storm and checks that
// sluice's callers add at most a tenth to the dependency's load once it
// turns slow, where the naive callers at least double it.
func TestAvalancheRetryStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("the storm takes about 10 s")
	}
	cfg := defaultStorm()
	cfg.Calm, cfg.Slow, cfg.After = time.Second, 1500*time.Millisecond, 2500*time.Millisecond
	naive, guarded, err := playStorm(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + stormTable(cfg, naive, guarded))
	if a := guarded.amplification(); a > 1.1 {
		t.Errorf("sluice's callers amplified the load %.2f×, want ≤ 1.1", a)
	}
	if a := naive.amplification(); a < 2 {
		t.Errorf("the naive callers amplified the load only %.2f×, want ≥ 2: the scenario shows no storm", a)
	}
}

func TestDepRecovery(t *testing.T) {
	ms := time.Millisecond
	heal := time.Second
	s := []served{
		{at: heal - ms, latency: time.Second},
		{at: heal + 10*ms, latency: 500 * ms}, // tenth 0: slow
		{at: heal + 110*ms, latency: 10 * ms}, // tenth 1: slow at the median
		{at: heal + 120*ms, latency: 600 * ms},
		{at: heal + 130*ms, latency: 700 * ms},
		{at: heal + 210*ms, latency: 10 * ms}, // tenth 2: fast at the median
		{at: heal + 220*ms, latency: 900 * ms},
		{at: heal + 230*ms, latency: 12 * ms},
		{at: heal + 510*ms, latency: 11 * ms}, // tenth 5, after three empty ones
	}
	if got := depRecovery(s, heal, 50*ms); got != 300*ms {
		t.Errorf("recovery = %v, want 300ms", got)
	}
	if got := depRecovery(s[:5], heal, 50*ms); got != -1 {
		t.Errorf("recovery = %v, want -1", got)
	}
}

// The storm's Guards, one per host that sluice's callers call, show on the
// dashboard with their retries.
func TestStormGuardsShowOnTheDashboard(t *testing.T) {
	d, err := dashboard.New()
	if err != nil {
		t.Fatal(err)
	}
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer failing.Close()
	cfg := defaultStorm()
	cfg.Guard = Config{Dashboard: d}.guard
	sc, err := sluiceClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.close()
	if err := sc.call(context.Background(), failing.URL); err == nil {
		t.Fatal("a 503 from every attempt ended in no error")
	}
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/state", nil))
	var s struct {
		Guards []struct {
			Name    string
			Retries uint64
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	want := "storm/" + strings.TrimPrefix(failing.URL, "http://")
	if len(s.Guards) != 1 || s.Guards[0].Name != want || s.Guards[0].Retries == 0 {
		t.Fatalf("dashboard shows %+v, want one Guard %q that retried", s.Guards, want)
	}
}
