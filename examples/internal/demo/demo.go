// Package demo holds what the example programs' scripted demonstrations
// share: the log of what the server reports, and a client that prints what
// it sees. The programs' main.go files, the code to read and copy, do not
// use it.
package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Events collects the lines the server logs (a breaker's state changes)
// until the demonstration prints them. It is safe for concurrent use.
type Events struct {
	mu    sync.Mutex
	lines []string
}

// Add records one line.
func (e *Events) Add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lines = append(e.lines, fmt.Sprintf(format, args...))
}

// Take returns the lines recorded since the last Take.
func (e *Events) Take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	lines := e.lines
	e.lines = nil
	return lines
}

// Client sends the demonstration's requests and prints their answers, each
// followed by the server's events it caused.
type Client struct {
	Base   string // the server's URL, without a trailing slash
	Out    io.Writer
	Events *Events
	HTTP   *http.Client
}

// Say prints one line of narration.
func (c *Client) Say(format string, args ...any) { fmt.Fprintf(c.Out, format+"\n", args...) }

// Do sends one request as the client forwardedFor (through the trusted
// proxy; none when empty) and prints the status, the fields sluice sets and
// the body.
func (c *Client) Do(ctx context.Context, method, path, forwardedFor string) error {
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, nil)
	if err != nil {
		return err
	}
	if forwardedFor != "" {
		req.Header.Set("X-Forwarded-For", forwardedFor)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Out, "%-4s %-16s %-13s -> %d", method, path, forwardedFor, resp.StatusCode)
	for _, f := range []string{"Retry-After", "RateLimit", "Age", "X-Degraded"} {
		if v := resp.Header.Get(f); v != "" {
			fmt.Fprintf(c.Out, "  %s: %s", f, v)
		}
	}
	fmt.Fprintf(c.Out, "\n     %s\n", strings.TrimSpace(string(body)))
	for _, line := range c.Events.Take() {
		fmt.Fprint(c.Out, line)
	}
	return nil
}
