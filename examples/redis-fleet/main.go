// Command redis-fleet runs two instances of a service, as two processes, that
// share one rate limit kept in Redis (package redislimit), then stops Redis to
// show what each failure policy does while Redis cannot decide.
//
// Every instance serves three routes limited to 6 requests a minute per API
// key, the same limit with three failure policies:
//
//   - /local  falls back to a local limiter holding this instance's share
//     (6 / 2 instances = 3 a minute): the fleet still admits about its limit;
//   - /open   admits everything: availability over the limit;
//   - /closed rejects everything with 503: the limit over availability.
//
// The program starts a private redis-server on a free loopback port (it must
// be in PATH), starts itself twice as the instances, sends requests to both,
// and prints what comes back.
//
//	go run ./examples/redis-fleet
//
// Or keep Redis and the two instances up, and try them by hand (-redis
// host:port uses a Redis of your own instead):
//
//	go run ./examples/redis-fleet -serve
//	curl -i -H 'X-Api-Key: alice' http://<printed address>/local
//
// One instance is in main.go; fleet.go starts Redis and the instances, and
// demo.go plays the demonstration against them.
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
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/examples/internal/apikey"
	"github.com/sluice-go/sluice/middleware"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/ratelimit"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
)

// The environment variables that make the program an instance: its name and
// the Redis it shares.
const (
	envInstance = "REDIS_FLEET_INSTANCE"
	envRedis    = "REDIS_FLEET_REDIS"
)

// instances is the number of instances the limit is shared by.
const instances = 2

func main() {
	if name := os.Getenv(envInstance); name != "" {
		os.Exit(instanceMain(name, os.Getenv(envRedis), os.Stdin, os.Stdout))
	}
	serve := flag.Bool("serve", false, "start Redis and two instances and keep them up until Ctrl-C")
	redisAddr := flag.String("redis", "", "with -serve, a running Redis for the instances to share instead of a private one")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *serve {
		err = serveUntil(ctx, *redisAddr, os.Stdout)
	} else {
		err = run(ctx, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis-fleet:", err)
		os.Exit(1)
	}
}

// instanceMain runs one instance: it serves on a free loopback port, prints
// "listening <addr>" on out, and stops when in is closed (its parent is gone).
func instanceMain(name, redisAddr string, in io.Reader, out io.Writer) int {
	if err := runInstance(name, redisAddr, in, out); err != nil {
		fmt.Fprintf(os.Stderr, "instance %s: %v\n", name, err)
		return 1
	}
	return 0
}

func runInstance(name, redisAddr string, in io.Reader, out io.Writer) error {
	// Ctrl-C reaches the whole process group: the parent decides when its
	// instances stop, by closing their stdin.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	// The limiters' own client, which must honour their short deadlines
	// (ContextTimeoutEnabled). Retries need no turning off: go-redis never
	// sends a limiter's script a second time once it may have reached Redis,
	// whatever MaxRetries says, so a request is never charged twice; a call
	// whose reply is lost goes to the route's failure policy instead.
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()

	routes := map[string]redislimit.Option{
		"GET /local":  redislimit.WithLocalFallback(instances),
		"GET /open":   redislimit.WithFailOpen(),
		"GET /closed": redislimit.WithFailClosed(),
	}
	opts := []middleware.RoutesOption{}
	var guards []*sluice.Guard
	defer func() {
		for _, g := range guards {
			g.Close()
		}
	}()
	for route, policy := range routes {
		// The name is part of the Redis keys: every instance must give a
		// limit the same name to share it.
		limitName := "fleet" + strings.TrimPrefix(route, "GET ")
		limiter, err := redislimit.NewGCRA(client, ratelimit.Rate{Count: 6, Period: time.Minute}, 6, policy,
			redislimit.WithName(limitName),
			// Two failed calls open the breaker around Redis: after that, an
			// outage costs the requests nothing.
			redislimit.WithBreaker(2, time.Second))
		if err != nil {
			return err
		}
		g, err := sluice.New(sluice.With(limiter))
		if err != nil {
			return err
		}
		guards = append(guards, g)
		opts = append(opts, middleware.RouteTo(route, g))
	}
	table, err := middleware.NewRoutes(opts...)
	if err != nil {
		return err
	}
	// The caller apikey.Authenticate found; a request without an API key is
	// answered 400.
	keyer, err := middleware.NewKeyer(middleware.RejectMissingKey(),
		apikey.Namespaced("caller:", middleware.KeyByContext(apikey.CallerFrom)))
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	for route := range routes {
		mux.HandleFunc(route, func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "served by %s\n", name)
		})
	}
	// Authentication runs first, so that the keyer finds the caller.
	guard, err := sluicehttp.Middleware(sluicehttp.WithRoutes(table), sluicehttp.WithKeyer(keyer))
	if err != nil {
		return err
	}
	handler := apikey.Authenticate(guard(mux))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(out, "listening %s\n", ln.Addr())

	_, _ = io.Copy(io.Discard, in) // until the parent closes our stdin
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(ctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
