package rules

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
)

// staleServe loads content with a stale cache among every guard's
// fallbacks and serves "/" and "GET /cart" with a body naming the caller.
func staleServe(t *testing.T, content string) http.Handler {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	cache, err := middleware.NewStaleCache(100, time.Hour, 1024)
	require.NoError(t, err)
	l, err := New(path, WithLogger(quietLog), WithGuardOptions(func(string) []sluice.Option {
		return []sluice.Option{sluice.WithFallback(cache)}
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	mw, err := l.HTTP()
	require.NoError(t, err)
	mux := http.NewServeMux()
	for _, p := range []string{"GET /cart", "/"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "private to "+r.RemoteAddr)
		})
	}
	return mw(mux)
}

func fromAddr(h http.Handler, addr string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.RemoteAddr = addr
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// On a guard whose missing key is shared, a keyless client's stale copy is
// kept by its connection, not under the shared key "unknown": another
// keyless client, rejected, is not answered with it. That holds when another
// guard of the same file rejects keyless requests (the Keyer's missing
// policy is then reject, and no longer tells "unknown" for no client's).
func TestAKeylessStaleCopyIsKeptByConnectionBesideARejectGuard(t *testing.T) {
	const shared = "guards:\n  api:\n    key: {header: X-Api-Key}\n    policies:\n" +
		"      - {name: u, kind: fixed-window, limit: 1, window: 1h}\n"
	const strict = "  strict:\n    key: {header: X-Api-Key, missing: reject}\n    policies:\n" +
		"      - {name: s, kind: fixed-window, limit: 5, window: 1h}\n" +
		"routes:\n  - {route: \"GET /cart\", guard: strict}\n"
	for _, tc := range []struct{ name, file string }{
		{"shared alone", shared + "default: api\n"},
		{"shared beside a reject guard", shared + strict + "default: api\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := staleServe(t, tc.file)
			a := fromAddr(h, "192.0.2.1:1000")
			require.Equal(t, 200, a.Code)
			b := fromAddr(h, "192.0.2.2:1000")
			assert.Equal(t, 429, b.Code, "a keyless client was served another's copy: %q", b.Body.String())
		})
	}
}

// A reload that only turns a guard's missing key from shared to reject
// keeps its Guard and its per-key limiters: the bucket every keyless
// request drew on, "unknown", does not become the bucket of the client
// that sends the key "unknown", which never sent a request.
func TestAReloadToRejectDoesNotHandTheKeylessBucketToAClient(t *testing.T) {
	const head = "guards:\n  api:\n    key: {header: X-Api-Key"
	const tail = "}\n    policies:\n      - {name: u, kind: fixed-window, limit: 1, window: 1h, per_key: true}\ndefault: api\n"
	l, path := newLoader(t, head+tail)
	h := serve(t, l)
	require.Equal(t, []int{200, 429}, statuses(h, "/x", 2), "keyless requests share one bucket")
	writeRules(t, path, head+", missing: reject"+tail)
	require.NoError(t, l.Reload())
	require.Equal(t, 400, get(h, "/x").Code, "keyless requests are now refused")
	assert.Equal(t, []int{200}, statuses(h, "/x", 1, "X-Api-Key", "unknown"),
		"the client keyed unknown, on its first request, got the keyless requests' spent budget")
}
