// Command live-rules runs a service whose guards are declared in a rules
// file, and changes the file while the service runs: the service picks up
// each change within a fraction of a second, with no restart.
//
// Run the scripted demonstration (it writes its rules file to a temporary
// directory, starts the server on a free loopback port, plays traffic,
// rewrites the file three times and prints what changed and when):
//
//	go run ./examples/live-rules
//
// Or serve a rules file of your own and edit it by hand:
//
//	go run ./examples/live-rules -serve -rules ./examples/live-rules/rules.yaml -addr 127.0.0.1:8080
//	curl -i localhost:8080/items
//	$EDITOR ./examples/live-rules/rules.yaml       # the server logs the reload
//	kill -HUP <pid>                               # loads it again on demand
//
// The service is in main.go; demo.go plays the demonstration against it.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
)

// initialRules are the rules the demonstration starts with; rules.yaml
// beside this file, which documents every field it uses.
//
//go:embed rules.yaml
var initialRules []byte

func main() {
	serve := flag.Bool("serve", false, "serve -rules on -addr until Ctrl-C instead of running the demonstration")
	path := flag.String("rules", "", "with -serve: the rules file to serve and watch")
	addr := flag.String("addr", "127.0.0.1:8080", "with -serve: the listen address")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *serve {
		err = serveUntil(ctx, *path, *addr, os.Stdout)
	} else {
		err = run(ctx, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "live-rules:", err)
		os.Exit(1)
	}
}

// service is the guarded service: the rules, and the handler that serves
// them.
type service struct {
	rules   *rules.Loader
	handler http.Handler
}

// counted is an observer that has the Guards keep their counters
// (sluice.Guard.Stats), shadow rejections among them.
type counted struct{}

func (counted) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return nil, nil, nil
}

// newService loads the rules file at path, watches it, and serves the
// shop's routes through the rules in force. opts are the Loader's.
func newService(path string, opts ...rules.Option) (*service, error) {
	opts = append(opts, rules.WithGuardOptions(func(string) []sluice.Option {
		return []sluice.Option{sluice.WithObserver(counted{})}
	}))
	l, err := rules.New(path, opts...)
	if err != nil {
		return nil, err
	}
	if err := l.Watch(); err != nil {
		l.Close()
		return nil, err
	}
	guard, err := l.HTTP()
	if err != nil {
		l.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `["kettle","teapot"]`)
	})
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	})
	return &service{rules: l, handler: guard(mux)}, nil
}

// start serves h on ln until shutdown is called.
func start(h http.Handler, ln net.Listener) (shutdown func() error) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
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
	}
}

// serveUntil serves the rules file at path on addr until ctx ends,
// loading it again on SIGHUP and whenever it changes.
func serveUntil(ctx context.Context, path, addr string, out io.Writer) error {
	if path == "" {
		return errors.New("-serve needs -rules")
	}
	svc, err := newService(path, rules.OnReload(func(st rules.Status) { report(out, st) }))
	if err != nil {
		return err
	}
	defer svc.rules.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	shutdown := start(svc.handler, ln)
	fmt.Fprintf(out, "listening on http://%s, rules version %d (Ctrl-C to stop)\n", ln.Addr(), svc.rules.Version().N)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			_ = svc.rules.Reload() // reported by OnReload
		case <-ctx.Done():
			return shutdown()
		}
	}
}

// report prints what a reload did.
func report(out io.Writer, st rules.Status) {
	if st.Err != nil {
		msg := strings.ReplaceAll(st.Err.Error(), "\n", "\n  ")
		fmt.Fprintf(out, "reload failed, version %d stays in force:\n  %s\n", st.Version.N, msg)
		return
	}
	fmt.Fprintf(out, "version %d (%.12s) in force:\n", st.Version.N, st.Version.Hash)
	for _, c := range st.Changes {
		fmt.Fprintf(out, "  %s\n", c)
	}
}
