package main

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// dependency is the downstream service both frontend routes call. Its /fast
// endpoint always answers in fastLatency; its /flaky endpoint answers in
// calmLatency until the sick phase begins, then in sickLatency with a share of
// 500s, until it heals.
type dependency struct {
	cfg  Config
	sick atomic.Bool
	srv  *http.Server
	addr string
	seq  atomic.Uint64
}

func startDependency(cfg Config) (*dependency, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &dependency{cfg: cfg, addr: ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fast", func(w http.ResponseWriter, r *http.Request) {
		if !pause(r.Context(), cfg.FastLatency) {
			return
		}
		_, _ = w.Write([]byte(`{"items":["a","b","c"]}`))
	})
	mux.HandleFunc("GET /flaky", func(w http.ResponseWriter, r *http.Request) {
		lat, fail := cfg.CalmLatency, false
		if d.sick.Load() {
			lat = cfg.SickLatency
			// A deterministic share of failures: every n-th call.
			fail = cfg.SickErrorEvery > 0 && d.seq.Add(1)%uint64(cfg.SickErrorEvery) == 0
		}
		if !pause(r.Context(), lat) {
			return
		}
		if fail {
			http.Error(w, "dependency failed", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte(`{"recommendations":["x","y"]}`))
	})
	d.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = d.srv.Serve(ln) }()
	return d, nil
}

// pause waits d, or until the caller gives up; it reports whether to answer.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (d *dependency) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = d.srv.Shutdown(ctx)
	_ = d.srv.Close()
}
