// Command http-server is a net/http service guarded by sluice:
//
//   - every route is limited per client IP (a token bucket per address, the
//     address read from X-Forwarded-For only when the peer is a trusted proxy);
//   - GET /prices and GET /recommendations call an upstream that can fail, each
//     behind its own circuit breaker;
//   - when a breaker is open, /prices answers with the last good response it
//     served (stale, with an Age field) and /recommendations with a fixed
//     degraded list; a rate-limited request gets 429 with Retry-After, the
//     RateLimit fields and a problem+json body.
//
// Run the scripted demonstration (it starts the server on a free loopback
// port, sends a few requests, prints what comes back and stops):
//
//	go run ./examples/http-server
//
// Or keep the server up and try it by hand:
//
//	go run ./examples/http-server -serve -addr 127.0.0.1:8080
//	curl -i localhost:8080/hello
//	curl -i -H 'X-Forwarded-For: 203.0.113.7' localhost:8080/hello
//	curl -X POST localhost:8080/upstream/down; curl -i localhost:8080/prices
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/middleware"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/ratelimit"
)

// openFor is how long a breaker stays open before it lets a probe through:
// short, so the demonstration sees it recover.
const openFor = 200 * time.Millisecond

func main() {
	serve := flag.Bool("serve", false, "keep serving on -addr until Ctrl-C instead of running the demonstration")
	addr := flag.String("addr", "127.0.0.1:8080", "listen address with -serve")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *serve {
		err = serveUntil(ctx, *addr, os.Stdout)
	} else {
		err = run(ctx, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "http-server:", err)
		os.Exit(1)
	}
}

// app is the service: its handler and what must be closed with it.
type app struct {
	handler      http.Handler
	routes       *middleware.Routes
	upstreamDown atomic.Bool // flipped by POST /upstream/{state} to play an outage
}

// newApp builds the service; every breaker state change is reported to
// logf.
func newApp(logf func(format string, args ...any)) (*app, error) {
	a := &app{}

	// One token bucket per client address: bursts of 4, refilled at 1 a
	// second, at most 10,000 addresses remembered. The same Keyed limiter
	// sits in every route's Guard, so a client has one budget for the service.
	perIP, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 4, ratelimit.WithName("ratelimit/per-ip"))
	}, ratelimit.WithKeyedName("ratelimit/per-ip"), ratelimit.WithMaxKeys(10_000))
	if err != nil {
		return nil, err
	}
	// Each upstream route has a breaker of its own: two failures in a row
	// open it, and it stays open openFor before one probe may close it.
	guardWithBreaker := func(name string) (*sluice.Guard, error) {
		b, err := breaker.New(name, breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(openFor))
		if err != nil {
			return nil, err
		}
		// Outer to inner: a request over its IP's budget never reaches the
		// breaker, and a request the breaker rejects gives its token back.
		return sluice.New(sluice.With(perIP, b), sluice.OnStateChange(func(c sluice.StateChange) {
			logf("     [%s: %s -> %s]\n", c.Policy, c.From, c.To)
		}))
	}
	plain, err := sluice.New(sluice.With(perIP))
	if err != nil {
		return nil, err
	}
	prices, err := guardWithBreaker("prices")
	if err != nil {
		return nil, err
	}
	recs, err := guardWithBreaker("recommendations")
	if err != nil {
		return nil, err
	}
	a.routes, err = middleware.NewRoutes(
		middleware.DefaultRoute(plain),
		middleware.RouteTo("GET /prices", prices),
		middleware.RouteTo("GET /recommendations", recs),
		middleware.RouteTo("POST /upstream/{state}", nil), // the demo's switch is not guarded
	)
	if err != nil {
		return nil, err
	}

	// Behind a load balancer, the peer is the balancer: trust its
	// X-Forwarded-For, and only its. Loopback stands for it here, so the
	// demonstration can play several clients from one machine.
	ips, err := middleware.NewIPExtractor(middleware.TrustedProxies("127.0.0.1/32", "::1/128"))
	if err != nil {
		return nil, err
	}
	keyer, err := middleware.NewKeyer(middleware.RejectMissingKey(), middleware.KeyByIP(ips))
	if err != nil {
		return nil, err
	}

	// /prices falls back on the last good answer it gave the same client for
	// the same URL, for up to a minute; /recommendations on a fixed list.
	// Both only when their breaker is open: a rate-limited client still
	// hears 429, so it slows down.
	stale, err := sluicehttp.NewStaleCache(1000, time.Minute, 64<<10)
	if err != nil {
		return nil, err
	}
	staleFB, err := sluicehttp.StaleFallback(stale)
	if err != nil {
		return nil, err
	}
	staticFB, err := sluicehttp.StaticFallback(http.StatusOK,
		http.Header{"Content-Type": {"application/json"}, "X-Degraded": {"circuit-open"}},
		[]byte(`{"items":["bestseller-1","bestseller-2"],"degraded":true}`+"\n"))
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		key, _ := sluice.KeyFrom(r.Context())
		fmt.Fprintf(w, "hello, %s\n", key)
	})
	mux.HandleFunc("GET /prices", a.upstream(`{"widget":9.99,"gadget":24.50}`))
	mux.HandleFunc("GET /recommendations", a.upstream(`{"items":["for-you-1","for-you-2"]}`))
	mux.HandleFunc("POST /upstream/{state}", func(w http.ResponseWriter, r *http.Request) {
		a.upstreamDown.Store(r.PathValue("state") == "down")
		fmt.Fprintf(w, "upstream %s\n", r.PathValue("state"))
	})

	a.handler = sluicehttp.Middleware(
		sluicehttp.WithRoutes(a.routes),
		sluicehttp.WithKeyer(keyer),
		sluicehttp.WithFallback("GET /prices", sluice.CauseCircuitOpen, staleFB),
		sluicehttp.WithFallback("GET /recommendations", sluice.CauseCircuitOpen, staticFB),
	)(mux)
	return a, nil
}

// upstream stands for a handler that depends on another service: it answers
// body while the upstream is up and 502 while it is down. A 5xx is what the
// breaker counts as a failure.
func (a *app) upstream(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if a.upstreamDown.Load() {
			http.Error(w, "upstream unavailable", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body+"\n")
	}
}

// close closes every Guard of the route table.
func (a *app) close() {
	for _, g := range a.routes.Guards() {
		g.Close()
	}
}

// start serves a on ln until shutdown is called.
func start(a *app, ln net.Listener) (shutdown func() error) {
	srv := &http.Server{Handler: a.handler, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(ctx)
		if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return err
	}
}

func serveUntil(ctx context.Context, addr string, out io.Writer) error {
	a, err := newApp(func(format string, args ...any) { fmt.Fprintf(out, format, args...) })
	if err != nil {
		return err
	}
	defer a.close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	shutdown := start(a, ln)
	fmt.Fprintf(out, "listening on http://%s (Ctrl-C to stop)\n", ln.Addr())
	<-ctx.Done()
	return shutdown()
}

// run starts the server on a free loopback port and plays the demonstration
// against it, printing what a client sees.
func run(ctx context.Context, out io.Writer) error {
	// The server's goroutines report state changes; the client prints them
	// under the answer of the request that caused them.
	var ev events
	a, err := newApp(ev.add)
	if err != nil {
		return err
	}
	defer a.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	shutdown := start(a, ln)
	c := &client{base: "http://" + ln.Addr().String(), out: out, events: &ev,
		http: &http.Client{Timeout: 5 * time.Second}}
	defer c.http.CloseIdleConnections()
	err = demo(ctx, c)
	err = errors.Join(err, shutdown())
	for _, line := range ev.take() {
		fmt.Fprint(out, line)
	}
	return err
}

func demo(ctx context.Context, c *client) error {
	c.say("1. per-IP limit: bursts of 4, then 429 until a token comes back")
	for range 5 {
		if err := c.do(ctx, "GET", "/hello", "203.0.113.7"); err != nil {
			return err
		}
	}
	c.say("another client, another bucket:")
	if err := c.do(ctx, "GET", "/hello", "198.51.100.2"); err != nil {
		return err
	}

	c.say("\n2. the upstream fails: two 502s open the breaker of each route, then the fallbacks answer")
	const client = "192.0.2.10" // one client, so the stale copy kept for it is found
	steps := []struct{ method, path string }{
		{"GET", "/prices"}, // a good answer, kept as the stale copy
		{"POST", "/upstream/down"},
		{"GET", "/prices"}, {"GET", "/prices"}, // failures: the breaker opens
		{"GET", "/prices"}, // open: the stale copy answers, with Age
		{"GET", "/recommendations"}, {"GET", "/recommendations"},
		{"GET", "/recommendations"}, // open: the static fallback answers
	}
	for i, s := range steps {
		ip := client
		switch {
		case s.method == "POST":
			ip = "" // the demonstration's switch, not a client
		case i >= 5:
			ip = "192.0.2.11" // a fresh budget for the second route
		}
		if err := c.do(ctx, s.method, s.path, ip); err != nil {
			return err
		}
	}

	c.say("\n3. the upstream heals; after %v the breaker lets a probe through, and it closes", openFor)
	if err := c.do(ctx, "POST", "/upstream/up", ""); err != nil {
		return err
	}
	// The only wait of the demonstration: the breaker's open duration.
	select {
	case <-time.After(openFor + 50*time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, path := range []string{"/prices", "/recommendations"} {
		if err := c.do(ctx, "GET", path, "192.0.2.12"); err != nil {
			return err
		}
	}
	return nil
}

// events collects the lines the server logs until the client prints them.
type events struct {
	mu    sync.Mutex
	lines []string
}

func (e *events) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lines = append(e.lines, fmt.Sprintf(format, args...))
}

func (e *events) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	lines := e.lines
	e.lines = nil
	return lines
}

// client sends the demonstration's requests and prints their answers.
type client struct {
	base   string
	out    io.Writer
	events *events
	http   *http.Client
}

func (c *client) say(format string, args ...any) { fmt.Fprintf(c.out, format+"\n", args...) }

// do sends one request as the client forwardedFor (through the trusted
// proxy) and prints the status, the fields sluice sets and the body.
func (c *client) do(ctx context.Context, method, path, forwardedFor string) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return err
	}
	if forwardedFor != "" {
		req.Header.Set("X-Forwarded-For", forwardedFor)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%-4s %-16s %-13s -> %d", method, path, forwardedFor, resp.StatusCode)
	for _, f := range []string{"Retry-After", "RateLimit", "Age", "X-Degraded"} {
		if v := resp.Header.Get(f); v != "" {
			fmt.Fprintf(c.out, "  %s: %s", f, v)
		}
	}
	fmt.Fprintf(c.out, "\n     %s\n", strings.TrimSpace(string(body)))
	for _, line := range c.events.take() {
		fmt.Fprint(c.out, line)
	}
	return nil
}
