package sluicehttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

// A handler that declares a Content-Length and writes a body of another
// length sends no whole response (the client gets a cut body): no stale
// copy is kept of it, to be served later as a complete 200.
func TestBodyShortOfItsContentLengthIsNoStaleCopy(t *testing.T) {
	for _, tc := range []struct {
		name, length, body string
	}{
		{"short", "10", "hello"}, // the handler stopped early
		{"excess", "3", "hello"}, // the write beneath refused it: ErrContentLength
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := sluice.NewManualClock(time.Hour)
			sw := openSwitch()
			cache := newStale(t, 8)
			g := guardWith(t, clock, sw, cache)
			h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", tc.length)
				_, _ = io.WriteString(w, tc.body)
			}))
			srv := httptest.NewServer(h)
			defer srv.Close()
			client := srv.Client()

			resp, err := client.Get(srv.URL + "/doc")
			require.NoError(t, err)
			_, rerr := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.Error(t, rerr, "the client never got a whole response")

			sw.on = true
			resp, err = client.Get(srv.URL + "/doc")
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode,
				"no whole response was kept; got %d %q", resp.StatusCode, b)
			assert.Equal(t, 0, cache.Len())
		})
	}
}

// Header fields set under a name of the handler's own spelling (assigned
// to the map, as net/http allows to keep a field's case) are the fields the
// client reads: a private answer, one that sets a cookie, one that varies,
// is not kept, nor served to another client.
func TestNonCanonicalPrivateFieldsAreNotKept(t *testing.T) {
	for _, tc := range []struct{ name, key, value string }{
		{"cache-control private", "cache-control", "private"},
		{"set-cookie", "set-cookie", "session=alice"},
		{"vary", "vary", "Cookie"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := sluice.NewManualClock(time.Hour)
			sw := openSwitch()
			cache := newStale(t, 8, middleware.StaleShared())
			g := guardWith(t, clock, sw, cache)
			h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header()[tc.key] = []string{tc.value}
				_, _ = io.WriteString(w, "alice's account")
			}))
			srv := httptest.NewServer(h)
			defer srv.Close()

			resp, err := srv.Client().Get(srv.URL + "/me")
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, []string{tc.value}, resp.Header.Values(tc.key), "the client reads the field")

			// Another client (StaleShared: any other connection, key or
			// address) asks during an outage.
			sw.on = true
			resp, err = srv.Client().Get(srv.URL + "/me")
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode,
				"another client got %q with %v", b, resp.Header)
			assert.Equal(t, 0, cache.Len())
		})
	}
}

// A response declaring two Content-Lengths is no whole response (a client
// refuses it): no stale copy is kept of it, to be served later as a whole
// 200 with one Content-Length.
func TestSeveralContentLengthsIsNoStaleCopy(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	sw := openSwitch()
	cache := newStale(t, 8)
	g := guardWith(t, clock, sw, cache)
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Length"] = []string{"5", "11"}
		_, _ = io.WriteString(w, "hello")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()

	resp, err := client.Get(srv.URL + "/doc")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	require.Error(t, err, "the client never got a whole response")

	sw.on = true
	resp, err = client.Get(srv.URL + "/doc")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "got %d %q", resp.StatusCode, b)
	assert.Equal(t, 0, cache.Len())
}

// A request whose client went away counts for nothing, and no fallback
// answers it: a rejection the handler passes to Reject for it neither.
func TestRejectForAClientGoneIsAnsweredByNoFallback(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	counter := testpolicy.NewCounter()
	fb := fallbacks(t, degrade.OnCircuitOpen(text(http.StatusOK, "fallback")))
	served := 0
	g, err := sluice.New(sluice.With(counter), sluice.WithClock(clock), sluice.WithFallback(fb),
		sluice.OnFallback(func(context.Context, sluice.FallbackEvent) { served++ }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	d := openSwitch().d
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel := r.Context().Value(cancelKey{}).(context.CancelFunc)
		cancel() // the client goes away while the dependency's call is rejected
		Reject(w, r, sluice.Rejection(d))
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx = context.WithValue(ctx, cancelKey{}, context.CancelFunc(cancel))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, counter.Outcomes())
	assert.Zero(t, served, "a fallback answered a request whose client had gone: %d %q", rec.Code, rec.Body.String())
}

type cancelKey struct{}

// stripAuth is an authentication middleware of the common kind that,
// once it has checked the bearer token, removes it from the request so
// that the application (and its logs) never see it: in place, on the
// request's shared Header map.
func stripAuth(w http.ResponseWriter, r *http.Request) {
	user := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	r.Header.Del("Authorization")
	if user == "" {
		user = "anonymous"
	}
	_, _ = io.WriteString(w, "account of "+user)
}

// A request's credentials are judged as it came: a handler (or an inner
// middleware) that consumed the Authorization field does not turn alice's
// personal answer into a copy served to every other client in an outage.
func TestCredentialsAreJudgedAsTheRequestCame(t *testing.T) {
	sw := openSwitch()
	cache := newStale(t, 8, middleware.StaleShared())
	g := guardWith(t, sluice.NewManualClock(time.Hour), sw, cache)
	h := mw(t, WithGuard(g))(http.HandlerFunc(stripAuth))

	r := httptest.NewRequest(http.MethodGet, "/me", nil)
	r.RemoteAddr = "192.0.2.1:1000"
	r.Header.Set("Authorization", "Bearer alice")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	require.Equal(t, "account of alice", rec.Body.String())

	assert.Equal(t, 0, cache.Len(), "a response to a request with Authorization, not public, is not kept")
	sw.on = true
	r = httptest.NewRequest(http.MethodGet, "/me", nil)
	r.RemoteAddr = "198.51.100.9:2000"
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	assert.NotEqual(t, "account of alice", rec.Body.String(), "bob, anonymous, is served alice's account")
}
