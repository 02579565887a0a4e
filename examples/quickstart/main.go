// Command quickstart is the smallest useful sluice service: an HTTP handler
// behind a Guard that allows each client 5 requests a second with bursts of
// 10, and answers 429 with Retry-After and the RateLimit fields beyond that.
// It serves until Ctrl-C.
//
//	go run ./examples/quickstart
//	curl -i localhost:8080/hello
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/ratelimit"
)

func main() {
	addr := flag.String("addr", "localhost:8080", "address to listen on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	if err := serve(ctx, ln); err != nil {
		log.Fatal(err)
	}
}

// handler returns the service: /hello behind a per-client token bucket.
func handler() (http.Handler, func() error, error) {
	// One token bucket per client IP, at most 10,000 clients remembered.
	perClient, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 10)
	}, ratelimit.WithName("per-client"), ratelimit.WithMaxKeys(10_000))
	if err != nil {
		return nil, nil, err
	}
	guard, err := sluice.New(sluice.With(perClient))
	if err != nil {
		return nil, nil, err
	}
	// The client is the connection's peer: no proxy is trusted here. An
	// IPv6 client usually holds a whole /64: limit the /64, not each of its
	// addresses.
	ips, err := middleware.NewIPExtractor(middleware.IPv6Prefix(64))
	if err != nil {
		return nil, nil, err
	}
	keyer, err := middleware.NewKeyer(middleware.SharedKey("unknown"), middleware.KeyByIP(ips))
	if err != nil {
		return nil, nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello from behind the guard")
	})
	mw, err := sluicehttp.Middleware(sluicehttp.WithGuard(guard), sluicehttp.WithKeyer(keyer))
	if err != nil {
		return nil, nil, err
	}
	return mw(mux), guard.Close, nil
}

// serve serves on ln until ctx ends.
func serve(ctx context.Context, ln net.Listener) error {
	h, closeGuard, err := handler()
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer closeGuard()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	fmt.Printf("listening on http://%s/hello (Ctrl-C to stop)\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	fmt.Println("\nshutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
