// Command observability runs a guarded HTTP service on loopback with a
// Prometheus /metrics endpoint, sends it traffic that trips a rate limiter
// and a circuit breaker, logs the breaker's state changes, and prints the
// scraped lines that matter. It serves the live dashboard too; with -serve
// it keeps serving both after the traffic, until interrupted, on -addr:
//
//	go run ./examples/observability
//	go run ./examples/observability -serve -addr 127.0.0.1:8080
//
// grafana-dashboard.json, beside it, charts the same metrics.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/middleware"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/observe/dashboard"
	"github.com/sluice-go/sluice/observe/otelmetrics"
	"github.com/sluice-go/sluice/observe/prommetrics"
	"github.com/sluice-go/sluice/observe/statelog"
	"github.com/sluice-go/sluice/ratelimit"
)

func main() {
	keep := flag.Bool("serve", false, "keep serving /metrics and the dashboard after the traffic, until interrupted")
	addr := flag.String("addr", "127.0.0.1:8080", "listen address with -serve")
	flag.Parse()
	var hold func()
	listen := "127.0.0.1:0" // a free port for the scripted traffic alone
	if *keep {
		listen = *addr
		hold = func() {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			fmt.Println("serving until interrupted (Ctrl-C)")
			<-ctx.Done()
		}
	}
	if err := run(os.Stdout, slog.New(slog.NewTextHandler(os.Stderr, nil)), listen, hold); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run serves the guarded service on addr, drives it, and writes the
// scraped lines that matter to out; then, if hold is not nil, it calls it
// before it stops serving.
func run(out io.Writer, log *slog.Logger, addr string, hold func()) error {
	metrics, metricsHandler, err := prommetrics.New(
		prommetrics.WithMetricsOptions(otelmetrics.WithResourceAttribute("http.route")))
	if err != nil {
		return err
	}
	logs, err := statelog.New(log)
	if err != nil {
		return err
	}
	// The dashboard: read-only here; dashboard.WithAuthorizer turns on its
	// admin actions.
	dash, err := dashboard.New()
	if err != nil {
		return err
	}

	// GET /search: 5 requests a minute. GET /pay: a breaker that opens after
	// 3 failures in a row.
	limit, err := ratelimit.NewFixedWindow(5, time.Minute, ratelimit.WithName("ratelimit/search"))
	if err != nil {
		return err
	}
	search, err := sluice.New(sluice.WithName("search"), sluice.With(limit),
		sluice.WithObserver(metrics), sluice.WithObserver(dash))
	if err != nil {
		return err
	}
	defer search.Close()
	payments, err := breaker.New("payments", breaker.WithConsecutiveFailures(3), breaker.WithOpenDuration(time.Minute))
	if err != nil {
		return err
	}
	pay, err := sluice.New(sluice.WithName("pay"), sluice.With(payments),
		sluice.WithObserver(metrics), sluice.WithObserver(logs), sluice.WithObserver(dash))
	if err != nil {
		return err
	}
	defer pay.Close()
	routes, err := middleware.NewRoutes(middleware.RouteTo("GET /search", search), middleware.RouteTo("GET /pay", pay))
	if err != nil {
		return err
	}
	guard, err := sluicehttp.Middleware(sluicehttp.WithRoutes(routes), sluicehttp.WithRouteResource())
	if err != nil {
		return err
	}

	app := http.NewServeMux()
	app.HandleFunc("GET /search", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "results") })
	app.HandleFunc("GET /pay", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "payments provider down", http.StatusBadGateway)
	})
	root := http.NewServeMux()
	root.Handle("GET /metrics", metricsHandler)
	root.Handle("/debug/sluice/", dash)
	root.Handle("/", guard(app))

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: root, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown(context.Background())
	base := "http://" + ln.Addr().String()

	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (string, error) {
		resp, err := client.Get(base + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for range 8 { // 5 served, 3 rate limited
		if _, err := get("/search"); err != nil {
			return err
		}
	}
	for range 5 { // 3 failures open the breaker; 2 rejected
		if _, err := get("/pay"); err != nil {
			return err
		}
	}

	body, err := get("/metrics")
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if matters(line) {
			fmt.Fprintln(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}

	// The dashboard's snapshot holds the same counts.
	state, err := get("/debug/sluice/api/state")
	if err != nil {
		return err
	}
	var snap struct {
		Guards []struct {
			Name     string
			Admitted uint64
			Rejected map[string]uint64
		}
	}
	if err := json.Unmarshal([]byte(state), &snap); err != nil {
		return err
	}
	fmt.Fprintf(out, "dashboard: %s/debug/sluice/\n", base)
	for _, g := range snap.Guards {
		fmt.Fprintf(out, "  guard %s: admitted %d, rejected %v\n", g.Name, g.Admitted, g.Rejected)
	}
	if hold != nil {
		hold()
	}
	return nil
}

// matters picks the lines worth reading from the exposition: the counts,
// the breaker's current state and the number of calls timed.
func matters(line string) bool {
	switch {
	case strings.HasPrefix(line, "sluice_requests_total{"),
		strings.HasPrefix(line, "sluice_call_duration_seconds_count{"),
		strings.HasPrefix(line, "sluice_circuit_breaker_transitions_total{"):
		return true
	case strings.HasPrefix(line, "sluice_circuit_breaker_state{"):
		return strings.HasSuffix(line, " 1")
	}
	return false
}
