// Command http-server is a net/http service guarded by sluice:
//
//   - one load shedder in front of every route keeps the service at its
//     capacity in a surge (adaptive.NewShedder: a limit on the requests in
//     flight learnt from their latency, nothing to tune);
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
//	curl -i localhost:8080/prices                  # a good answer, kept
//	curl -X POST localhost:8080/upstream/down
//	for i in 1 2 3; do curl -si localhost:8080/prices; done   # 502s open the breaker, then the stale copy with Age
//
// (Back to back: the breaker stays open 200ms, and typed one by one the
// calls would each find it half-open, probe, and get the 502 again. A
// client IP has a burst of 4 and one more a second: pasted all at once,
// the lines before spend it and the loop meets 429s; wait a few seconds
// before the loop.)
//
// The service is in main.go; demo.go plays the demonstration against it.
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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
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
	}, ratelimit.WithName("ratelimit/per-ip"), ratelimit.WithMaxKeys(10_000))
	if err != nil {
		return nil, err
	}
	// One load shedder for the whole service, outermost: in a surge it
	// admits what the service can serve quickly and sheds the rest with
	// 503 and Retry-After, before they reach the other policies.
	shed, err := adaptive.NewShedder()
	if err != nil {
		return nil, err
	}
	// Each upstream route has a breaker of its own: two failures in a row
	// open it, and it stays open openFor before one probe may close it.
	// Its fallbacks answer the route's rejections: the Guard declares them,
	// and the middleware serves those that answer an http.Handler.
	guardWithBreaker := func(name string, fallback sluice.Fallback) (*sluice.Guard, error) {
		b, err := breaker.New(name, breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(openFor))
		if err != nil {
			return nil, err
		}
		// Outer to inner: a request over its IP's budget never reaches the
		// breaker, and a request the breaker rejects gives its token back.
		b.Subscribe(func(c sluice.StateChange) {
			logf("     [%s: %s -> %s]\n", c.Policy, c.From, c.To)
		})
		return sluice.New(sluice.With(shed, perIP, b), sluice.WithFallback(fallback))
	}
	// /prices falls back on the last good answer for the same URL, for up
	// to a minute, to every client (prices do not depend on who asks:
	// StaleShared; by default a copy serves only the client it answered);
	// /recommendations on a fixed list. Both only when their breaker is
	// open: a rate-limited client still hears 429, so it slows down.
	stale, err := middleware.NewStaleCache(1000, time.Minute, 64<<10,
		middleware.StaleShared(), middleware.StaleOnly(sluice.CauseCircuitOpen))
	if err != nil {
		return nil, err
	}
	bestsellers, err := degrade.New(degrade.OnCircuitOpen(degrade.Value[http.Handler](
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Degraded", "circuit-open")
			io.WriteString(w, `{"items":["bestseller-1","bestseller-2"],"degraded":true}`+"\n")
		}))))
	if err != nil {
		return nil, err
	}
	plain, err := sluice.New(sluice.With(shed, perIP))
	if err != nil {
		return nil, err
	}
	prices, err := guardWithBreaker("prices", stale)
	if err != nil {
		return nil, err
	}
	recs, err := guardWithBreaker("recommendations", bestsellers)
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
	ips, err := middleware.NewIPExtractor(middleware.TrustedProxies("127.0.0.1/32", "::1/128"),
		// An IPv6 client usually holds a whole /64: limit the /64, not
		// each of its addresses.
		middleware.IPv6Prefix(64))
	if err != nil {
		return nil, err
	}
	keyer, err := middleware.NewKeyer(middleware.RejectMissingKey(), middleware.KeyByIP(ips))
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

	guard, err := sluicehttp.Middleware(sluicehttp.WithRoutes(a.routes), sluicehttp.WithKeyer(keyer))
	if err != nil {
		return nil, err
	}
	a.handler = guard(mux)
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
	_ = a.routes.Close()
}

// start serves a on ln until shutdown is called.
func start(a *app, ln net.Listener) (shutdown func() error) {
	srv := &http.Server{Handler: a.handler, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
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
