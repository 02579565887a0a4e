package sluicehttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

// failingAfter returns a handler that answers "prices v1" first, then a 502
// with a body of its own, advancing clock by 20 s before its WriteHeader
// (before is set: a slow dependency) or between it and its body (a slow
// error body), and a Guard whose stale cache keeps copies for a minute.
func failingAfter(t *testing.T, clock *sluice.ManualClock, before bool) http.Handler {
	t.Helper()
	g := guardWith(t, clock, testpolicy.NewCounter(), newStale(t, 8)) // maxAge: one minute
	n := 0
	return mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n++
		if n == 1 {
			_, _ = io.WriteString(w, "prices v1")
			return
		}
		if before {
			clock.Advance(20 * time.Second)
		}
		w.WriteHeader(http.StatusBadGateway)
		if !before {
			clock.Advance(20 * time.Second)
		}
		_, _ = io.WriteString(w, "upstream prices-db refused the connection")
	}))
}

// Whether a fallback answers a handler's 5xx, which holds the 5xx back and
// drops its body, is judged when the handler writes it, and the fallback
// answers as judged then: a stale copy 50 s old at the request's arrival
// and 70 s old at the 502 answers nothing, and the handler's own answer
// goes out whole; one 50 s old at the 502 and 70 s old when the handler
// returns answers, and the client gets the copy, not a 502 stripped of
// its body.
func TestAHeldFailureIsAnsweredAsJudgedWhenItWasHeld(t *testing.T) {
	for _, c := range []struct {
		before     bool
		code       int
		body, what string
	}{
		{true, http.StatusBadGateway, "upstream prices-db refused the connection", "too old at the 502: the handler's own answer"},
		{false, http.StatusOK, "prices v1", "young at the 502: the copy"},
	} {
		clock := sluice.NewManualClock(time.Hour)
		h := failingAfter(t, clock, c.before)
		require.Equal(t, "prices v1", serve(h, http.MethodGet, "/prices").Body.String())
		clock.Advance(50 * time.Second)
		rec := serve(h, http.MethodGet, "/prices")
		assert.Equal(t, c.code, rec.Code, c.what)
		assert.Equal(t, c.body, rec.Body.String(), c.what)
	}
}

// A stale cache that is not shared keeps the copies of a request without a
// key of its own (no Keyer, or the Keyer's MissingKey bucket, "unknown",
// which it shares for its limits) by its connection: one keyless client's
// copy serves no other.
func TestAKeylessClientsCopyServesNoOther(t *testing.T) {
	keyer, err := middleware.NewKeyer(middleware.MissingKey{}, middleware.KeyByHeader("X-Api-Key"))
	require.NoError(t, err)
	for _, opts := range [][]Option{nil, {WithKeyer(keyer)}} {
		sw := openSwitch()
		g := guardWith(t, sluice.NewManualClock(time.Hour), sw, newStale(t, 8))
		h := mw(t, append(opts, WithGuard(g))...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "account of "+r.Header.Get("X-Session"))
		}))
		from := func(addr, session string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodGet, "/me", nil)
			r.RemoteAddr = addr
			r.Header.Set("X-Session", session)
			h.ServeHTTP(rec, r)
			return rec
		}
		require.Equal(t, "account of alice", from("192.0.2.1:1000", "alice").Body.String())
		sw.on = true
		rec := from("198.51.100.9:2000", "bob")
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code,
			"keyer %v: another client has no copy of its own; it got %q", len(opts) > 0, rec.Body.String())
		assert.Equal(t, "account of alice", from("192.0.2.1:1001", "alice").Body.String(),
			"the same client on another connection gets its copy")
	}
}

// realIP sets r.RemoteAddr from X-Real-Ip in place, as chi's
// middleware.RealIP and gorilla's handlers.ProxyHeaders do.
func realIP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ip := r.Header.Get("X-Real-Ip"); ip != "" {
			r.RemoteAddr = ip
		}
		next.ServeHTTP(w, r)
	})
}

// Without a Keyer, a copy is kept under the connection's address as the
// request came, not as a RealIP-style middleware inside rewrote it: the
// rejection, answered before that middleware runs, finds it.
func TestAKeylessCopyIsKeptUnderTheAddressItCameFrom(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	sw := openSwitch()
	cache := newStale(t, 8)
	g := guardWith(t, clock, sw, cache)
	h := mw(t, WithGuard(g))(realIP(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "prices v1")
	})))
	get := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/prices", nil)
		r.RemoteAddr = "10.0.0.1:4000" // the proxy
		r.Header.Set("X-Real-Ip", "203.0.113.7")
		h.ServeHTTP(rec, r)
		return rec
	}
	require.Equal(t, "prices v1", get().Body.String())
	require.Equal(t, 1, cache.Len())
	sw.on = true
	clock.Advance(time.Second)
	rec := get()
	assert.Equal(t, http.StatusOK, rec.Code, "the same client's copy is not served: %q", rec.Body.String())
}

// A copy too old for one request's lookup stays for another that a
// fallback was found to answer at an earlier instant: a 5xx held back for
// the copy, young then, is answered by it though the same client's next
// request, failing meanwhile at a later instant, found it too old.
func TestAHeldFailuresCopyOutlivesAConcurrentLookup(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	g := guardWith(t, clock, testpolicy.NewCounter(), newStale(t, 8)) // maxAge: one minute
	n := 0
	var h http.Handler
	h = mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n++
		switch n {
		case 1:
			_, _ = io.WriteString(w, "prices v1")
		case 2:
			// Held at 50 s: the copy is young.
			w.WriteHeader(http.StatusBadGateway)
			clock.Advance(20 * time.Second)
			// Meanwhile the same client's second request fails too, at 70 s.
			other := serve(h, http.MethodGet, "/prices")
			assert.Equal(t, http.StatusBadGateway, other.Code, "too old for the second request: its own 502")
			_, _ = io.WriteString(w, "upstream prices-db refused the connection")
		default:
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "upstream prices-db refused the connection")
		}
	}))
	require.Equal(t, "prices v1", serve(h, http.MethodGet, "/prices").Body.String())
	clock.Advance(50 * time.Second)
	rec := serve(h, http.MethodGet, "/prices")
	assert.Equal(t, http.StatusOK, rec.Code, "the request held for the copy, young at its 502")
	assert.Equal(t, "prices v1", rec.Body.String())
}

// A stale copy answering a rejection by the route's own Guard goes out with
// its own representation fields: an outer middleware's default
// Content-Type and Cache-Control describe no body of the copy's.
func TestAStaleCopyOnARejectionKeepsItsOwnContentType(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	sw := openSwitch()
	cache := newStale(t, 8)
	g := guardWith(t, clock, sw, cache)
	inner := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=5")
		_, _ = io.WriteString(w, "<p>hello</p>")
	}))
	// An outer middleware sets defaults the handler overrides.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("X-Request-Id", "req-"+r.URL.Query().Get("n"))
		inner.ServeHTTP(w, r)
	})
	rec := serve(h, http.MethodGet, "/doc")
	assert.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"))
	sw.on = true
	rec = serve(h, http.MethodGet, "/doc")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "<p>hello</p>", rec.Body.String())
	assert.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"), "the copy's body is HTML")
	assert.Equal(t, "max-age=5", rec.Header().Get("Cache-Control"), "a downstream cache must not keep the copy for an hour")
}
