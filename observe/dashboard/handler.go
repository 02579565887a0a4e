package dashboard

import (
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"strings"
	"time"
	"weak"
)

//go:embed assets
var assets embed.FS

var page = template.Must(template.ParseFS(assets, "assets/index.html"))

// ServeHTTP serves the page and its endpoints, by the end of the request's
// path, so the Dashboard works under any prefix: …/app.js and …/app.css,
// …/api/state (the snapshot as JSON), …/api/events (the snapshot once a
// second as server-sent events), …/api/action (admin actions, by POST);
// any other path is the page.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	// Every request registers its server's shutdown (the page before its
	// stream, as a rule): a stream whose request was read before Shutdown
	// began, and that reaches here after its hooks ran, ends at once only
	// if something registered the server before. The first request a
	// server sends here at all, when it is such a stream, holds Shutdown
	// to its deadline: net/http tells no handler that Shutdown began.
	d.shutdownOf(r)
	path := r.URL.Path
	switch {
	case strings.HasSuffix(path, "/api/action"):
		d.action(w, r)
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	case strings.HasSuffix(path, "/api/state"):
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(d.snapshot(time.Now()))
	case strings.HasSuffix(path, "/api/events"):
		d.stream(w, r)
	case strings.HasSuffix(path, "/app.js"), strings.HasSuffix(path, "/app.css"):
		http.ServeFileFS(w, r, assets, "assets"+path[strings.LastIndexByte(path, '/'):])
	default:
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		_ = page.Execute(w, struct {
			Token   string
			Actions bool
		}{d.token(time.Now()), d.authorize != nil})
	}
}

// stream sends the snapshot at once and then every second, until the
// client goes away, stops reading, or the server shuts down. Its write
// deadlines go through http.ResponseController: behind a wrapper that
// hides them (no Unwrap), the server's WriteTimeout still ends it.
func (d *Dashboard) stream(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		// The headers alone: a stream whose body goes nowhere would run
		// until the client's connection ends, which a client reusing it
		// for its next request never lets happen.
		return
	}
	if err := rc.Flush(); errors.Is(err, http.ErrNotSupported) {
		h.Del("Cache-Control")
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	shut := d.shutdownOf(r)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	enc := json.NewEncoder(w)
	for {
		// Each event has its own write deadline: the server's
		// WriteTimeout, counted from the request, would end a healthy
		// stream, and without any a client that stops reading would hold
		// this goroutine in Write for ever.
		if err := rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return
		}
		if _, err := w.Write([]byte("event: state\ndata: ")); err != nil {
			return
		}
		if err := enc.Encode(d.snapshot(time.Now())); err != nil { // ends with "\n"
			return
		}
		if _, err := w.Write([]byte("\n")); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-shut:
			return
		case <-tick.C:
		}
	}
}

// streamWriteTimeout bounds the writing of one event of the stream.
const streamWriteTimeout = 10 * time.Second

// shutdownOf returns a channel closed when the server serving r shuts down
// (http.Server.Shutdown waits for the requests under way, and a stream
// would never end of itself), or nil when r tells no server.
func (d *Dashboard) shutdownOf(r *http.Request) <-chan struct{} {
	srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
	if srv == nil {
		return nil
	}
	key := weak.Make(srv) // a server gone is not kept for its entry
	d.shutMu.Lock()
	defer d.shutMu.Unlock()
	if ch, ok := d.shutdowns[key]; ok {
		return ch
	}
	if d.shutdowns == nil {
		d.shutdowns = make(map[weak.Pointer[http.Server]]chan struct{})
	}
	for k := range d.shutdowns {
		if k.Value() == nil {
			delete(d.shutdowns, k) // its server collected
		}
	}
	ch := make(chan struct{})
	d.shutdowns[key] = ch
	// The channel stays, closed, once the server shuts down: a stream
	// reaching here later (its request read before Shutdown began) ends at
	// once rather than register a hook that would never run.
	srv.RegisterOnShutdown(func() { close(ch) })
	return ch
}
