package rules_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluice-go/sluice/rules"
)

const exampleRules = `
guards:
  api:
    key: {header: X-API-Key}
    policies:
      - {name: per-client, kind: fixed-window, limit: 100, window: 1m, per_key: true}
routes:
  - {route: "GET /items", guard: api}
  - {route: "GET /healthz", guard: none}
`

func Example() {
	dir, err := os.MkdirTemp("", "rules")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(exampleRules), 0o644); err != nil {
		panic(err)
	}
	quiet := rules.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "[]") })

	live, err := rules.New(path, quiet)
	if err != nil {
		panic(err) // every error of the file, each with its line
	}
	defer live.Close()
	// Load the file again whenever it changes; live.Reload() does it on
	// demand (on SIGHUP, from an admin endpoint).
	if err := live.Watch(); err != nil {
		panic(err)
	}
	mw, err := live.HTTP()
	if err != nil {
		panic(err)
	}
	h := mw(mux) // serves the rules in force, reload after reload

	tighter := strings.Replace(exampleRules, "limit: 100", "limit: 1", 1)
	if err := os.WriteFile(path, []byte(tighter), 0o644); err != nil {
		panic(err)
	}
	if err := live.Reload(); err != nil {
		panic(err)
	}
	fmt.Println(live.Version().N, live.Status().Changes)
	for range 2 {
		r := httptest.NewRequest(http.MethodGet, "/items", nil)
		r.Header.Set("X-API-Key", "alice")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code)
	}
	// Output:
	// 2 [policy per-client: limit 100 → 1 (in place)]
	// 200
	// 429
}
