package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-go/sluice/rules"
)

// edits are the demonstration's changes to the rules file, in order, each
// made to the last file that loaded.
var edits = []struct {
	what    string
	rewrite func(string) string
	broken  bool
}{
	{"a tighter limit: 5 per client, refilled at 1 a minute", func(s string) string {
		return strings.Replace(s, "rate: 1000/s\n        burst: 100", "rate: 1/min\n        burst: 5", 1)
	}, false},
	{"a broken file: a misspelt kind and a negative rate", func(s string) string {
		return strings.Replace(strings.Replace(s, "kind: breaker", "kind: braker", 1), "rate: 1/min", "rate: -1/min", 1)
	}, true},
	{"the tight limit in shadow mode", func(s string) string {
		return strings.Replace(s, "per_key: true", "per_key: true\n        shadow: true", 1)
	}, false},
}

// run plays the demonstration: traffic, then each edit of the rules file
// and traffic again, printing what the service did.
func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "live-rules-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, initialRules, 0o644); err != nil {
		return err
	}
	reloads := make(chan rules.Status, len(edits))
	svc, err := newService(path,
		rules.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		rules.OnReload(func(st rules.Status) { reloads <- st }))
	if err != nil {
		return err
	}
	defer svc.rules.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	shutdown := start(svc.handler, ln)
	err = demonstrate(ctx, out, dir, path, "http://"+ln.Addr().String(), svc, reloads)
	return errors.Join(err, shutdown())
}

// demonstrate plays traffic to the service at base, then each edit of the
// rules file at path, in dir, and traffic again.
func demonstrate(ctx context.Context, out io.Writer, dir, path, base string, svc *service, reloads <-chan rules.Status) error {
	fmt.Fprintf(out, "rules version %d loaded; serving on %s\n", svc.rules.Version().N, base)
	client := &http.Client{Timeout: 5 * time.Second}
	if err := play(ctx, out, client, base, svc); err != nil {
		return err
	}
	good := string(initialRules)
	for i, e := range edits {
		content := e.rewrite(good)
		if !e.broken {
			good = content
		}
		fmt.Fprintf(out, "\n-- edit %d: %s\n", i+1, e.what)
		wrote := time.Now()
		if err := save(path, content); err != nil {
			return err
		}
		select {
		case st := <-reloads:
			fmt.Fprintf(out, "seen %v after the write; ", time.Since(wrote).Round(time.Millisecond))
			var b bytes.Buffer
			report(&b, st)
			out.Write(bytes.ReplaceAll(b.Bytes(), []byte(dir+string(filepath.Separator)), nil))
		case <-time.After(5 * time.Second):
			return fmt.Errorf("edit %d not seen within 5s", i+1)
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := play(ctx, out, client, base, svc); err != nil {
			return err
		}
	}
	return nil
}

// save writes the rules file as editors do: a new file renamed over the
// old one.
func save(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// play sends ten GET /items and prints how they were answered.
func play(ctx context.Context, out io.Writer, client *http.Client, base string, svc *service) error {
	codes := map[int]int{}
	var order []int
	for range 10 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/items", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if codes[resp.StatusCode] == 0 {
			order = append(order, resp.StatusCode)
		}
		codes[resp.StatusCode]++
	}
	var parts []string
	for _, c := range order {
		parts = append(parts, fmt.Sprintf("%d × %d", codes[c], c))
	}
	fmt.Fprintf(out, "GET /items ×10 -> %s", strings.Join(parts, ", "))
	g, _ := svc.rules.Guard("shop")
	if n := g.Stats().Policies[0].ShadowRejected; n > 0 {
		fmt.Fprintf(out, " (per-client would have rejected %d so far, in shadow mode)", n)
	}
	fmt.Fprintln(out)
	return nil
}
