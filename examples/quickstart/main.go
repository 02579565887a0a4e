// Command quickstart is the smallest useful sluice service: an HTTP handler
// wrapped in a Guard that allows 5 requests a second per client with bursts of
// 10, and answers 429 with Retry-After beyond that.
//
//	go run ./examples/quickstart
//	curl -i localhost:8080/hello
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

func main() {
	addr := flag.String("addr", "localhost:8080", "address to listen on")
	flag.Parse()
	if err := serve(*addr); err != nil {
		log.Fatal(err)
	}
}

func serve(addr string) error {
	// One token bucket per client IP, at most 10,000 clients remembered.
	perClient, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 10, ratelimit.WithName("ratelimit/per-client"))
	}, ratelimit.WithMaxKeys(10_000))
	if err != nil {
		return err
	}
	guard, err := sluice.New(sluice.With(perClient))
	if err != nil {
		return err
	}
	defer guard.Close()

	hello := func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello from behind the guard")
	}
	mux := http.NewServeMux()
	mux.Handle("GET /hello", guarded(guard, http.HandlerFunc(hello)))

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Printf("listening on http://%s/hello (Ctrl-C to stop)\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
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

// guarded runs next under g, keyed by the client's IP; a rejection becomes a
// 429 with Retry-After in whole seconds, rounded up.
func guarded(g *sluice.Guard, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			ip = r.RemoteAddr
		}
		ctx := sluice.WithKey(r.Context(), ip)
		err = g.Do(ctx, func(ctx context.Context) error {
			next.ServeHTTP(w, r.WithContext(ctx))
			return nil
		})
		var rej *sluice.RejectedError
		if errors.As(err, &rej) {
			secs := int(math.Ceil(rej.RetryAfter().Seconds()))
			w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
			http.Error(w, "too many requests", http.StatusTooManyRequests)
		}
	})
}
