package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// A server runs in a child process of its own: the program starts itself
// again with -serve=scenario/library, and the child prints the address it
// listens on and serves until its standard input closes.

// serveArgs is the child's command line, after the program's path.
func serveArgs(scenario, lib string, perChunk int) []string {
	return []string{"-serve=" + scenario + "/" + lib, "-burn=" + strconv.Itoa(perChunk)}
}

// depStats is what a slow-dependency child reports on /stats.
type depStats struct {
	FirstOpenMs float64 `json:"first_open_ms"` // -1: no breaker refused a call while sick
	SickCalls   int64   `json:"sick_calls"`
}

// serve runs the child: spec is scenario/library.
func serve(spec string, perChunk int) error {
	scenario, name, ok := strings.Cut(spec, "/")
	if !ok {
		return fmt.Errorf("-serve=%q: want scenario/library", spec)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/ping", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	switch scenario {
	case "cpu", "pool":
		lib, ok := findShed(name)
		if !ok {
			return fmt.Errorf("no library %q", name)
		}
		w := cpuWork(perChunk)
		if scenario == "pool" {
			w = poolWork(newPool(poolConns))
		}
		h, err := lib.wrap(w)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		mux.Handle("/work", h)
	case "dep":
		lib, ok := findBreaker(name)
		if !ok {
			return fmt.Errorf("no library %q", name)
		}
		dep := newDependency()
		call, err := lib.build(dep)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for _, route := range []string{routeA, routeB} {
			mux.HandleFunc("/"+route, func(w http.ResponseWriter, r *http.Request) {
				a := call(r.Context(), route)
				w.Header().Set("X-Answer", a.String())
				if a == ansError {
					http.Error(w, "failed", http.StatusServiceUnavailable)
					return
				}
				_, _ = w.Write([]byte(a.String()))
			})
		}
		mux.HandleFunc("/ctl", func(w http.ResponseWriter, r *http.Request) {
			dep.setSick(r.FormValue("sick") == "1")
		})
		mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
			dep.mu.Lock()
			st := depStats{FirstOpenMs: -1, SickCalls: dep.sickCalls.Load()}
			if dep.firstOpen >= 0 {
				st.FirstOpenMs = float64(dep.firstOpen) / float64(time.Millisecond)
			}
			dep.mu.Unlock()
			_ = json.NewEncoder(w).Encode(st)
		})
	default:
		return fmt.Errorf("no scenario %q", scenario)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("listening %s\n", ln.Addr())
	// The parent is done with this server when it closes our standard
	// input; what is still in flight no longer counts.
	_, _ = io.Copy(io.Discard, os.Stdin)
	if sentinelDir != "" {
		_ = os.RemoveAll(sentinelDir)
	}
	return nil
}

func findShed(name string) (shedLib, bool) {
	for _, l := range shedLibs {
		if l.name == name {
			return l, true
		}
	}
	return shedLib{}, false
}

func findBreaker(name string) (breakerLib, bool) {
	for _, l := range breakerLibs {
		if l.name == name {
			return l, true
		}
	}
	return breakerLib{}, false
}

// child is a running server process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	base  string // http://addr
}

// startChild starts exe with args and waits for the address it listens on.
func startChild(exe string, args []string) (*child, error) {
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	// A server built with the race detector would otherwise sleep a second
	// on its way out.
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				line <- addr
				break
			}
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case addr, ok := <-line:
		if !ok {
			c.stop()
			return nil, fmt.Errorf("%v: exited before listening", args)
		}
		c.base = "http://" + addr
		return c, nil
	case <-time.After(30 * time.Second):
		c.stop()
		return nil, fmt.Errorf("%v: not listening after 30s", args)
	}
}

// stop closes the child's standard input and waits for it, killing it if it
// takes more than a few seconds.
func (c *child) stop() {
	_ = c.stdin.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}
