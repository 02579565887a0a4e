package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

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
