package main

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/observe/dashboard"
)

// startDashboard serves, on loopback, a dashboard of the Guards that the
// options of cfg.guard are given to, with its admin actions open to
// loopback clients, and prints its address. stop shuts it down.
func startDashboard(cfg *Config) (stop func(), err error) {
	loopback := func(r *http.Request) bool {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		return err == nil && net.ParseIP(host).IsLoopback()
	}
	dash, err := dashboard.New(dashboard.WithAuthorizer(loopback))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/sluice/", dash)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("dashboard: http://%s/debug/sluice/ (the guarded run's Guards)\n", ln.Addr())
	cfg.Dashboard = dash
	return func() { _ = srv.Close() }, nil
}

// guard returns the options every Guard of the guarded frontend gets when
// a dashboard is served: its name, and the dashboard; none otherwise.
func (c Config) guard(name string) []sluice.Option {
	if c.Dashboard == nil {
		return nil
	}
	return []sluice.Option{sluice.WithName(name), sluice.WithObserver(c.Dashboard)}
}
