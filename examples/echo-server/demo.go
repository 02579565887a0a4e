package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/sluice-go/sluice/examples/internal/demo"
)

// run starts the server on a free loopback port and plays the demonstration
// against it, printing what a client sees.
func run(ctx context.Context, out io.Writer) error {
	// The server's goroutines report state changes; the client prints them
	// under the answer of the request that caused them.
	var ev demo.Events
	a, err := newApp(ev.Add)
	if err != nil {
		return err
	}
	defer a.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	shutdown := start(a, ln)
	c := &demo.Client{Base: "http://" + ln.Addr().String(), Out: out, Events: &ev,
		HTTP: &http.Client{Timeout: 5 * time.Second}}
	defer c.HTTP.CloseIdleConnections()
	err = errors.Join(play(ctx, c), shutdown())
	for _, line := range ev.Take() {
		fmt.Fprint(out, line)
	}
	return err
}

func play(ctx context.Context, c *demo.Client) error {
	c.Say("1. per-IP limit: bursts of 4, then 429 until a token comes back")
	for range 5 {
		if err := c.Do(ctx, "GET", "/hello", "203.0.113.7"); err != nil {
			return err
		}
	}

	c.Say("\n2. the upstream fails: two 502s open each route's breaker")
	steps := []struct{ method, path, client string }{
		{"POST", "/upstream/down", ""},
		{"GET", "/orders/7", "192.0.2.10"},
		{"GET", "/orders/8", "192.0.2.10"},
		{"GET", "/orders/9", "192.0.2.10"}, // open: 503, Retry-After, problem+json
		{"GET", "/recommendations", "192.0.2.11"},
		{"GET", "/recommendations", "192.0.2.11"},
		{"GET", "/recommendations", "192.0.2.11"}, // open: the degraded list
	}
	for _, s := range steps {
		if err := c.Do(ctx, s.method, s.path, s.client); err != nil {
			return err
		}
	}

	c.Say("\n3. the upstream heals; after %v a probe goes through and the breakers close", openFor)
	if err := c.Do(ctx, "POST", "/upstream/up", ""); err != nil {
		return err
	}
	select { // the only wait: the breakers' open duration
	case <-time.After(openFor + 50*time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, path := range []string{"/orders/9", "/recommendations"} {
		if err := c.Do(ctx, "GET", path, "192.0.2.12"); err != nil {
			return err
		}
	}
	return nil
}
