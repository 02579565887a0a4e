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
	err = play(ctx, c)
	err = errors.Join(err, shutdown())
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
	c.Say("another client, another bucket:")
	if err := c.Do(ctx, "GET", "/hello", "198.51.100.2"); err != nil {
		return err
	}

	c.Say("\n2. the upstream fails: two 502s open the breaker of each route, then the fallbacks answer")
	const client = "192.0.2.10" // one client: its budget shows in the RateLimit field
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
		if err := c.Do(ctx, s.method, s.path, ip); err != nil {
			return err
		}
	}

	c.Say("\n3. the upstream heals; after %v the breaker lets a probe through, and it closes", openFor)
	if err := c.Do(ctx, "POST", "/upstream/up", ""); err != nil {
		return err
	}
	// The only wait of the demonstration: the breaker's open duration.
	select {
	case <-time.After(openFor + 50*time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, path := range []string{"/prices", "/recommendations"} {
		if err := c.Do(ctx, "GET", path, "192.0.2.12"); err != nil {
			return err
		}
	}
	return nil
}
