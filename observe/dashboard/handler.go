package dashboard

import (
	"embed"
	"encoding/json"
	"html/template"
	"net/http"
	"strings"
	"time"
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
// client goes away.
func (d *Dashboard) stream(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		// The headers alone: a stream whose body goes nowhere would run
		// until the client's connection ends, which a client reusing it
		// for its next request never lets happen.
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	enc := json.NewEncoder(w)
	for {
		if _, err := w.Write([]byte("event: state\ndata: ")); err != nil {
			return
		}
		if err := enc.Encode(d.snapshot(time.Now())); err != nil { // ends with "\n"
			return
		}
		if _, err := w.Write([]byte("\n")); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}
