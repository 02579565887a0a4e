// Command per-route gives each route of a net/http service its own guard
// with a middleware.Routes table:
//
//   - GET /search: 5 requests per 10 s per caller (a sliding window): cheap,
//     but scraped;
//   - POST /checkout: 2 per minute per caller (GCRA): expensive, and a
//     retry storm there costs real money;
//   - every other route: one shared ceiling of 100 requests a second;
//   - GET /healthz: never limited, so the load balancer keeps seeing the
//     instance even when its callers are turned away.
//
// A caller is who its API key (X-Api-Key) names when it sends one, else its
// IP address; a key the service did not issue is answered 401.
//
// Run the scripted demonstration:
//
//	go run ./examples/per-route
//
// Or keep the server up and try it by hand:
//
//	go run ./examples/per-route -serve -addr 127.0.0.1:8080
//	curl -i -H 'X-Api-Key: alice' 'localhost:8080/search?q=kettle'
//	curl -i -X POST -H 'X-Api-Key: alice' localhost:8080/checkout
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
	"syscall"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/examples/internal/apikey"
	"github.com/sluice-go/sluice/middleware"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/ratelimit"
)

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
		fmt.Fprintln(os.Stderr, "per-route:", err)
		os.Exit(1)
	}
}

// perCaller returns a Guard keeping one limiter per caller, each made by
// newLimiter.
func perCaller(name string, newLimiter func() (sluice.Policy, error)) (*sluice.Guard, error) {
	keyed, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) { return newLimiter() },
		ratelimit.WithName(name), ratelimit.WithMaxKeys(10_000))
	if err != nil {
		return nil, err
	}
	return sluice.New(sluice.With(keyed))
}

// newHandler returns the service with its per-route guards, and the route
// table, whose Guards must be closed when done.
func newHandler() (http.Handler, *middleware.Routes, error) {
	search, err := perCaller("ratelimit/search", func() (sluice.Policy, error) {
		return ratelimit.NewSlidingWindow(5, 10*time.Second, 10, ratelimit.WithName("ratelimit/search"))
	})
	if err != nil {
		return nil, nil, err
	}
	checkout, err := perCaller("ratelimit/checkout", func() (sluice.Policy, error) {
		return ratelimit.NewGCRA(ratelimit.Rate{Count: 2, Period: time.Minute}, 2, ratelimit.WithName("ratelimit/checkout"))
	})
	if err != nil {
		return nil, nil, err
	}
	// Not keyed: a ceiling for the whole instance.
	ceiling, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(100), 100, ratelimit.WithName("ratelimit/instance"))
	if err != nil {
		return nil, nil, err
	}
	rest, err := sluice.New(sluice.With(ceiling))
	if err != nil {
		return nil, nil, err
	}
	// Patterns are the http.ServeMux patterns the handlers are registered
	// under: the middleware finds a request's route as the mux would.
	routes, err := middleware.NewRoutes(
		middleware.RouteTo("GET /search", search),
		middleware.RouteTo("POST /checkout", checkout),
		middleware.DefaultRoute(rest),
	)
	if err != nil {
		return nil, nil, err
	}

	// No proxy in front: the peer is the client. An IPv6 client usually
	// holds a whole /64: limit the /64, not each of its addresses.
	ips, err := middleware.NewIPExtractor(middleware.IPv6Prefix(64))
	if err != nil {
		return nil, nil, err
	}
	// The caller apikey.Authenticate found, else the IP address. The Keyer
	// keeps the keys of its two functions apart ("0:…", "1:…"), so that a
	// caller named like someone's address never draws on that address's
	// budget; the prefixes here only make them readable.
	keyer, err := middleware.NewKeyer(middleware.SharedKey("unknown"),
		apikey.Namespaced("caller:", middleware.KeyByContext(apikey.CallerFrom)),
		apikey.Namespaced("ip:", middleware.KeyByIP(ips)))
	if err != nil {
		return nil, nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /search", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "results for %q\n", r.URL.Query().Get("q"))
	})
	mux.HandleFunc("POST /checkout", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "order placed\n")
	})
	mux.HandleFunc("GET /about", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "a shop\n")
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})

	guard, err := sluicehttp.Middleware(
		sluicehttp.WithRoutes(routes),
		sluicehttp.WithKeyer(keyer),
		// The health check bypasses every guard, the default one included.
		sluicehttp.WithSkipper(func(r *http.Request) bool { return r.URL.Path == "/healthz" }),
	)
	if err != nil {
		return nil, nil, err
	}
	// Authentication runs first, so that the keyer finds the caller.
	return apikey.Authenticate(guard(mux)), routes, nil
}

// start serves h on ln until shutdown is called.
func start(h http.Handler, ln net.Listener) (shutdown func() error) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
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

func closeAll(routes *middleware.Routes) {
	_ = routes.Close()
}

func serveUntil(ctx context.Context, addr string, out io.Writer) error {
	h, routes, err := newHandler()
	if err != nil {
		return err
	}
	defer closeAll(routes)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	shutdown := start(h, ln)
	fmt.Fprintf(out, "listening on http://%s (Ctrl-C to stop)\n", ln.Addr())
	<-ctx.Done()
	return shutdown()
}
