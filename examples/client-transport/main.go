// Command client-transport protects a service from a dependency that turns
// slow or fails, on the client side: an http.Client whose transport
// (sluicehttp.Transport) guards every host it calls with
//
//   - a circuit breaker: two failures in a row stop the calls for 200 ms, then
//     one probe tells whether the host is back;
//   - a concurrency limit of 2 calls in flight, so a slow host ties up at most
//     two goroutines and connections, however much traffic comes;
//   - the client's timeout of 100 ms, whose expiry counts as a failure;
//
// and that honours a dependency's own 429 or 503 Retry-After by sending it
// nothing until then.
//
// Run the scripted demonstration (a stand-in dependency on a loopback port,
// reached under the name inventory.internal):
//
//	go run ./examples/client-transport
//
// Or serve a small frontend that calls the dependency, and steer both by hand:
//
//	go run ./examples/client-transport -serve -addr 127.0.0.1:8080
//	curl localhost:8080/stock
//	curl -X POST localhost:8080/dependency/slow   # or failing, busy, healthy
//
// The guarded client is in main.go; demo.go holds the stand-in dependency and
// the scripted demonstration.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
)

const (
	// timeout bounds every call to the dependency.
	timeout = 100 * time.Millisecond
	// openFor is how long a breaker stays open before it lets a probe through.
	openFor = 200 * time.Millisecond
	// url is where the service finds its dependency.
	url = "http://inventory.internal/stock"
)

func main() {
	serve := flag.Bool("serve", false, "serve a frontend on -addr until Ctrl-C instead of running the demonstration")
	addr := flag.String("addr", "127.0.0.1:8080", "frontend listen address with -serve")
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
		fmt.Fprintln(os.Stderr, "client-transport:", err)
		os.Exit(1)
	}
}

// newClient returns an http.Client whose calls are guarded per host, and its
// transport, to close when done. dependencyAddr is where the demonstration's
// dependency really listens; every host name is dialled there.
func newClient(dependencyAddr string, logf func(format string, args ...any)) (*http.Client, *sluicehttp.RoundTripper, error) {
	var dialer net.Dialer
	base := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, dependencyAddr)
		},
		MaxIdleConnsPerHost: 4,
	}
	// The Transport calls this once per host and keeps the Guard: each host
	// has its own breaker and its own share of goroutines.
	perHost := func(host string) (*sluice.Guard, error) {
		b, err := breaker.New(host, breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(openFor))
		if err != nil {
			return nil, err
		}
		limit, err := adaptive.NewBulkhead(2, adaptive.WithName("bulkhead/"+host))
		if err != nil {
			return nil, err
		}
		// Outer to inner: an open breaker answers before the bulkhead is
		// asked; a call the bulkhead turns away gives the breaker its probe
		// back.
		// The Guard's timeout bounds each call, until its body is read:
		// past it the call's context ends, the caller gets a timeout, and
		// the call counts as a failure of its host.
		b.Subscribe(func(c sluice.StateChange) {
			logf("    [%s: %s -> %s]\n", c.Policy, c.From, c.To)
		})
		return sluice.New(sluice.With(b, limit), sluice.WithTimeout(timeout))
	}
	// A dependency's 429 or 503 with Retry-After holds its breaker open that
	// long, but never more than a minute, whatever it asks.
	rt, err := sluicehttp.Transport(base, perHost, sluicehttp.WithMaxRetryAfter(time.Minute))
	if err != nil {
		return nil, nil, err
	}
	return &http.Client{Transport: rt}, rt, nil
}

// describe makes one call and says how it went, as the calling code sees it.
func describe(ctx context.Context, c *http.Client) string {
	s, _ := fetch(ctx, c)
	return s
}

// fetch is describe with the status a frontend answers it with: the
// dependency's own, 503 for a call the Guard did not send, 504 for one it
// timed out, 502 for another error.
func fetch(ctx context.Context, c *http.Client) (string, int) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error(), http.StatusInternalServerError
	}
	resp, err := c.Do(req)
	d, rejected := sluice.RejectionOf(err)
	var nerr net.Error
	switch {
	case rejected:
		// Not sent: the Guard answered at once.
		s := fmt.Sprintf("not sent: %s by %s", sluice.CauseOf(err), d.Policy)
		if ra := d.RetryAfter; ra > 0 {
			s += fmt.Sprintf(", retry after %v", ra.Round(10*time.Millisecond))
		}
		return s, http.StatusServiceUnavailable
	case errors.As(err, &nerr) && nerr.Timeout():
		return fmt.Sprintf("timed out after %v", timeout), http.StatusGatewayTimeout
	case err != nil:
		return "error: " + err.Error(), http.StatusBadGateway
	}
	defer resp.Body.Close() // closing the body ends the call for the Guard
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "error: " + err.Error(), http.StatusBadGateway
	}
	s := fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		s += "  Retry-After: " + ra
	}
	return s, resp.StatusCode
}

// serveUntil serves a frontend on addr whose GET /stock calls the dependency
// through the guarded client, and whose POST /dependency/{mode} steers it.
func serveUntil(ctx context.Context, addr string, out io.Writer) error {
	dep := &dependency{}
	stopDep, depAddr, err := dep.start("127.0.0.1:0")
	if err != nil {
		return err
	}
	client, rt, err := newClient(depAddr, func(format string, args ...any) { fmt.Fprintf(out, format, args...) })
	if err != nil {
		return errors.Join(err, stopDep())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stock", func(w http.ResponseWriter, r *http.Request) {
		s, status := fetch(r.Context(), client)
		w.WriteHeader(status)
		fmt.Fprintln(w, s)
	})
	mux.HandleFunc("POST /dependency/{mode}", func(w http.ResponseWriter, r *http.Request) {
		mode := r.PathValue("mode")
		switch mode {
		case "healthy", "slow", "failing", "busy":
		default:
			http.Error(w, "unknown mode "+strconv.Quote(mode)+": healthy, slow, failing or busy", http.StatusBadRequest)
			return
		}
		dep.setMode(mode)
		fmt.Fprintf(w, "dependency %s\n", mode)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return errors.Join(err, rt.Close(), stopDep())
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(out, "frontend on http://%s (Ctrl-C to stop)\n", ln.Addr())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	rt.CloseIdleConnections()
	return errors.Join(err, rt.Close(), stopDep())
}
