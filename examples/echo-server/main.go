// Command echo-server is an Echo service guarded by sluice:
//
//   - every route is limited per client IP (a token bucket per address, the
//     address read from X-Forwarded-For only when the peer is a trusted proxy);
//   - GET /orders/:id and GET /recommendations call an upstream that can fail,
//     each behind its own circuit breaker;
//   - a fallback answers /recommendations from a fixed degraded list while
//     its breaker is open, and every other rejection gets the standard answer:
//     429 or 503 with Retry-After and a problem+json body, and the RateLimit
//     fields when a rate limit decided.
//
// Run the scripted demonstration:
//
//	go run ./examples/echo-server
//
// Or keep the server up and try it by hand:
//
//	go run ./examples/echo-server -serve -addr 127.0.0.1:8080
//	curl -i localhost:8080/hello
//	curl -X POST localhost:8080/upstream/down; curl -i localhost:8080/orders/7
//
// The service is in main.go; demo.go plays the demonstration against it.
package main

import (
	"context"
	"encoding/json"
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

	"github.com/labstack/echo/v4"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/middleware"
	sluiceecho "github.com/sluice-go/sluice/middleware/echo"
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
		fmt.Fprintln(os.Stderr, "echo-server:", err)
		os.Exit(1)
	}
}

// degraded is what /recommendations answers while its upstream cannot.
var degraded = map[string]any{"items": []string{"bestseller-1", "bestseller-2"}, "degraded": true}

// app is the service: its Echo instance and what must be closed with it.
type app struct {
	echo         *echo.Echo
	routes       *middleware.Routes
	upstreamDown atomic.Bool // flipped by POST /upstream/:state to play an outage
}

// newApp builds the service; every breaker state change is reported to
// logf.
func newApp(logf func(format string, args ...any)) (*app, error) {
	a := &app{}

	// One token bucket per client address (bursts of 4, refilled at 1 a
	// second), shared by every route's Guard: one budget per client.
	perIP, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 4, ratelimit.WithName("ratelimit/per-ip"))
	}, ratelimit.WithName("ratelimit/per-ip"), ratelimit.WithMaxKeys(10_000))
	if err != nil {
		return nil, err
	}
	guardWithBreaker := func(name string, opts ...sluice.Option) (*sluice.Guard, error) {
		b, err := breaker.New(name, breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(openFor))
		if err != nil {
			return nil, err
		}
		b.Subscribe(func(c sluice.StateChange) {
			logf("     [%s: %s -> %s]\n", c.Policy, c.From, c.To)
		})
		return sluice.New(append(opts, sluice.With(perIP, b))...)
	}
	// /recommendations answers from a fixed list while its breaker is open:
	// a fallback of its Guard, which the middleware serves.
	fixedList, err := degrade.New(degrade.OnCircuitOpen(degrade.Value[http.Handler](http.HandlerFunc(answerDegraded))))
	if err != nil {
		return nil, err
	}
	plain, err := sluice.New(sluice.With(perIP))
	if err != nil {
		return nil, err
	}
	orders, err := guardWithBreaker("orders")
	if err != nil {
		return nil, err
	}
	recs, err := guardWithBreaker("recommendations", sluice.WithFallback(fixedList))
	if err != nil {
		return nil, err
	}
	// Echo routes are matched by their registered path (c.Path()), so
	// "/orders/:id" is one route whatever the id; an entry that names the
	// method too ("POST /orders/:id") would guard that method's requests
	// alone.
	a.routes, err = middleware.NewRoutes(
		middleware.DefaultRoute(plain),
		middleware.RouteTo("/orders/:id", orders),
		middleware.RouteTo("/recommendations", recs),
		middleware.RouteTo("/upstream/:state", nil), // the demo's switch is not guarded
	)
	if err != nil {
		return nil, err
	}
	// Loopback stands for the load balancer in front: its X-Forwarded-For is
	// believed, anyone else's is ignored.
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

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	// Echo's http.Server has no timeouts of its own: without them a client
	// that trickles its header in, or idles on a kept-alive connection, holds
	// a connection for as long as it likes.
	e.Server.ReadHeaderTimeout = 5 * time.Second
	e.Server.IdleTimeout = time.Minute
	guard, err := sluiceecho.Middleware(sluiceecho.WithRoutes(a.routes), sluiceecho.WithKeyer(keyer))
	if err != nil {
		return nil, err
	}
	e.Use(guard)
	e.GET("/hello", func(c echo.Context) error {
		key, _ := sluice.KeyFrom(c.Request().Context())
		return c.String(http.StatusOK, "hello, "+key+"\n")
	})
	e.GET("/orders/:id", func(c echo.Context) error {
		if a.upstreamDown.Load() {
			// An error Echo renders as 502: the breaker counts it as a failure.
			return echo.NewHTTPError(http.StatusBadGateway, "upstream unavailable")
		}
		return c.JSON(http.StatusOK, map[string]string{"order": c.Param("id"), "status": "shipped"})
	})
	e.GET("/recommendations", func(c echo.Context) error {
		if a.upstreamDown.Load() {
			return echo.NewHTTPError(http.StatusBadGateway, "upstream unavailable")
		}
		return c.JSON(http.StatusOK, map[string]any{"items": []string{"for-you-1", "for-you-2"}})
	})
	e.POST("/upstream/:state", func(c echo.Context) error {
		a.upstreamDown.Store(c.Param("state") == "down")
		return c.String(http.StatusOK, "upstream "+c.Param("state")+"\n")
	})
	a.echo = e
	return a, nil
}

// answerDegraded answers /recommendations from a fixed list, the fallback
// for an open circuit.
func answerDegraded(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Degraded", sluice.CauseCircuitOpen.String())
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(degraded)
}

// close closes every Guard of the route table.
func (a *app) close() {
	_ = a.routes.Close()
}

// start serves a on ln until shutdown is called.
func start(a *app, ln net.Listener) (shutdown func() error) {
	a.echo.Listener = ln
	errc := make(chan error, 1)
	go func() { errc <- a.echo.Start("") }()
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := a.echo.Shutdown(ctx)
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
