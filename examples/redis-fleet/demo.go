package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// run starts Redis and two instances and plays the demonstration.
func run(ctx context.Context, out io.Writer) (err error) {
	rs, err := startRedis()
	if err != nil {
		return err
	}
	defer func() {
		if rs != nil {
			rs.stop()
		}
	}()
	fleet, err := startFleet(rs.addr)
	if err != nil {
		return err
	}
	defer func() {
		for _, i := range fleet {
			err = errors.Join(err, i.stop())
		}
	}()
	a, b := fleet[0], fleet[1]
	c := &client{out: out, http: &http.Client{Timeout: 5 * time.Second}}
	defer c.http.CloseIdleConnections()

	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	say("1. instances A and B share alice's limit of 6 a minute in Redis:")
	say("   whichever instance she reaches, the 7th request is refused")
	for n := range 8 {
		if err := c.show(ctx, []*instance{a, b}[n%2], "/local", "alice"); err != nil {
			return err
		}
	}

	say("\n2. Redis stops; each route's failure policy decides")
	rs.stop()
	rs = nil
	say("   /local: each instance keeps its share, 6 / 2 = 3 a minute, for bob")
	for _, i := range []*instance{a, a, a, a, b} {
		if err := c.show(ctx, i, "/local", "bob"); err != nil {
			return err
		}
	}
	say("   /open: everything is admitted")
	for _, i := range []*instance{a, b} {
		if err := c.show(ctx, i, "/open", "bob"); err != nil {
			return err
		}
	}
	say("   /closed: everything is refused with 503")
	for _, i := range []*instance{a, b} {
		if err := c.show(ctx, i, "/closed", "bob"); err != nil {
			return err
		}
	}
	return nil
}

// client sends the demonstration's requests and prints their answers.
type client struct {
	out  io.Writer
	http *http.Client
}

// show sends GET path to instance i with the API key key, and prints the
// status and the fields the limit set.
func (c *client) show(ctx context.Context, i *instance, path, key string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+i.addr+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Api-Key", key)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "   %s %-7s %-5s -> %d", i.name, path, key, resp.StatusCode)
	for _, f := range []string{"RateLimit", "Retry-After"} {
		if v := resp.Header.Get(f); v != "" {
			fmt.Fprintf(c.out, "  %s: %s", f, v)
		}
	}
	fmt.Fprintln(c.out)
	return nil
}
