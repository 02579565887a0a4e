package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// run starts the server on a free loopback port and plays the demonstration
// against it.
func run(ctx context.Context, out io.Writer) error {
	h, routes, err := newHandler()
	if err != nil {
		return err
	}
	defer closeAll(routes)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	shutdown := start(h, ln)
	c := &client{base: "http://" + ln.Addr().String(), out: out, http: &http.Client{Timeout: 5 * time.Second}}
	defer c.http.CloseIdleConnections()
	return errors.Join(demo(ctx, c), shutdown())
}

func demo(ctx context.Context, c *client) error {
	say := func(format string, args ...any) { fmt.Fprintf(c.out, format+"\n", args...) }

	say("1. /search allows alice 5 requests per 10 s")
	for range 6 {
		if err := c.show(ctx, "GET", "/search?q=kettle", "alice"); err != nil {
			return err
		}
	}
	say("\n2. /checkout has its own, tighter limit: 2 per minute")
	for range 3 {
		if err := c.show(ctx, "POST", "/checkout", "alice"); err != nil {
			return err
		}
	}
	say("\n3. bob has budgets of his own")
	if err := c.show(ctx, "GET", "/search?q=kettle", "bob"); err != nil {
		return err
	}
	say("\n4. other routes share the instance's ceiling")
	if err := c.show(ctx, "GET", "/about", ""); err != nil {
		return err
	}
	say("\n5. the health check is never limited, and carries no RateLimit fields")
	statuses := map[int]int{}
	limited := 0
	for range 20 {
		resp, _, err := c.do(ctx, "GET", "/healthz", "alice")
		if err != nil {
			return err
		}
		statuses[resp.StatusCode]++
		if resp.Header.Get("RateLimit") != "" {
			limited++
		}
	}
	say("GET  /healthz ×20 -> %d × 200, %d with RateLimit fields", statuses[http.StatusOK], limited)
	return nil
}

// client sends the demonstration's requests and prints their answers.
type client struct {
	base string
	out  io.Writer
	http *http.Client
}

func (c *client) do(ctx context.Context, method, path, apiKey string) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return nil, "", err
	}
	if apiKey != "" {
		req.Header.Set("X-Api-Key", apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, strings.TrimSpace(string(body)), err
}

// show sends one request as apiKey and prints the status, the fields the
// route's guard set, and, on a rejection, the problem body.
func (c *client) show(ctx context.Context, method, path, apiKey string) error {
	resp, body, err := c.do(ctx, method, path, apiKey)
	if err != nil {
		return err
	}
	who := apiKey
	if who == "" {
		who = "(no key)"
	}
	fmt.Fprintf(c.out, "%-4s %-17s %-8s -> %d", method, path, who, resp.StatusCode)
	for _, f := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
		if v := resp.Header.Get(f); v != "" {
			fmt.Fprintf(c.out, "  %s: %s", f, v)
		}
	}
	fmt.Fprintln(c.out)
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		fmt.Fprintf(c.out, "     %s\n", body)
	}
	return nil
}
