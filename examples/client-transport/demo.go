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
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/examples/internal/demo"
)

// run starts the dependency on a free loopback port and plays the
// demonstration against it through the guarded client.
func run(ctx context.Context, out io.Writer) error {
	dep := &dependency{}
	stop, addr, err := dep.start("127.0.0.1:0")
	if err != nil {
		return err
	}
	var ev demo.Events
	client, rt, err := newClient(addr, ev.Add)
	if err != nil {
		return errors.Join(err, stop())
	}
	err = play(ctx, out, dep, client, &ev)
	rt.CloseIdleConnections()
	return errors.Join(err, rt.Close(), stop())
}

func play(ctx context.Context, out io.Writer, dep *dependency, client *http.Client, ev *demo.Events) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	// The breakers' state changes are printed under what caused them.
	flush := func() {
		for _, line := range ev.Take() {
			fmt.Fprint(out, line)
		}
	}
	call := func() {
		say("GET %s -> %s   (dependency saw %d calls)", url, describe(ctx, client), dep.calls.Load())
		flush()
	}
	wait := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	say("1. the dependency is healthy")
	call()

	say("\n2. it turns slow: of 4 concurrent calls, 2 wait their %v and time out, 2 are turned away at once", timeout)
	dep.setMode("slow")
	results := make([]string, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = describe(ctx, client) })
	}
	wg.Wait()
	tally := map[string]int{} // by outcome, whatever the retry delay
	for _, r := range results {
		r, _, _ = strings.Cut(r, ", retry after")
		tally[r]++
	}
	for _, r := range []string{fmt.Sprintf("timed out after %v", timeout),
		"not sent: concurrency-limited by bulkhead/inventory.internal"} {
		say("  %d × %s", tally[r], r)
		delete(tally, r)
	}
	for r, n := range tally { // anything else a loaded machine produced
		say("  %d × %s", n, r)
	}
	flush()
	say("   the two timeouts opened the breaker: the next call fails fast, unsent")
	call()

	say("\n3. the dependency heals; after %v a probe goes through and the breaker closes", openFor)
	dep.setMode("healthy")
	if err := wait(openFor + 50*time.Millisecond); err != nil {
		return err
	}
	call()

	say("\n4. it fails: two 500s in a row open the breaker, and the next call fails fast, unsent")
	dep.setMode("failing")
	call()
	call()
	call()
	dep.setMode("healthy")
	if err := wait(openFor + 50*time.Millisecond); err != nil {
		return err
	}
	say("   healed, after %v:", openFor)
	call()

	say("\n5. it is overloaded and says so: 503 with Retry-After: 1 holds the breaker open for 1s")
	dep.setMode("busy")
	call()
	dep.setMode("healthy")
	call()
	if err := wait(time.Second + 50*time.Millisecond); err != nil {
		return err
	}
	say("   one second later:")
	call()
	return nil
}

// dependency stands for the remote service: healthy, slow (300 ms a call),
// failing (500) or busy (503 with Retry-After: 1).
type dependency struct {
	mode  atomic.Value // string
	calls atomic.Int64
}

func (d *dependency) setMode(m string) { d.mode.Store(m) }

func (d *dependency) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.calls.Add(1)
	mode, _ := d.mode.Load().(string)
	switch mode {
	case "slow":
		select {
		case <-time.After(300 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	case "failing":
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	case "busy":
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "stock=12\n")
}

// start serves d on addr until stop is called.
func (d *dependency) start(addr string) (stop func() error, bound string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(ctx)
		if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return err
	}, ln.Addr().String(), nil
}
