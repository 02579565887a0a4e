package main

import (
	"io"
	"net/http"
)

// unguarded is the frontend as it is usually first written: each route calls
// the dependency through the shared pool, waits as long as it takes, and turns
// a failure into a 502.
type unguarded struct {
	dep    string
	client *http.Client
}

func newUnguarded(_ Config, depBase string, client *http.Client) (frontend, error) {
	return &unguarded{dep: depBase, client: client}, nil
}

func (u *unguarded) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+routePaths[0], func(w http.ResponseWriter, r *http.Request) { u.proxy(w, r, "/fast") })
	mux.HandleFunc("GET "+routePaths[1], func(w http.ResponseWriter, r *http.Request) { u.proxy(w, r, "/flaky") })
	return mux
}

func (u *unguarded) proxy(w http.ResponseWriter, r *http.Request, path string) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u.dep+path, nil)
	if err != nil {
		http.Error(w, "bad gateway", http.StatusBadGateway)
		return
	}
	resp, err := u.client.Do(req)
	if err != nil {
		http.Error(w, "bad gateway", http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 500 {
		_, _ = io.Copy(io.Discard, resp.Body)
		http.Error(w, "bad gateway", http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.Copy(w, resp.Body)
}

func (u *unguarded) close() {}
