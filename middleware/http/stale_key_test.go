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

// Whether a fallback answers a handler's 5xx, which holds the 5xx back and
// drops its body, is judged at the instant the fallback answers: a stale
// copy young at the request's arrival and too old when the handler fails
// answers nothing, and the handler's own answer goes out whole.
func TestAHeldFailureIsJudgedAtTheInstantItIsAnswered(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	cache := newStale(t, 8) // maxAge: one minute
	g := guardWith(t, clock, testpolicy.NewCounter(), cache)
	n := 0
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n++
		if n == 1 {
			_, _ = io.WriteString(w, "prices v1")
			return
		}
		clock.Advance(20 * time.Second) // a slow dependency
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "upstream prices-db refused the connection")
	}))
	require.Equal(t, "prices v1", serve(h, http.MethodGet, "/prices").Body.String())
	clock.Advance(50 * time.Second)
	rec := serve(h, http.MethodGet, "/prices") // copy 50 s old at arrival, 70 s when answered
	require.Equal(t, http.StatusBadGateway, rec.Code, "the copy is too old to serve")
	assert.Equal(t, "upstream prices-db refused the connection", rec.Body.String(),
		"no fallback answered: the handler's own answer should go out whole")
}

// A request whose Keyer found it no key shares the MissingKey's bucket
// ("unknown") for its limits, not its stale copies: those are kept by its
// connection, and one keyless client's copy serves no other.
func TestAStaleCopyOfAKeylessClientServesOnlyThatClient(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	sw := openSwitch()
	g := guardWith(t, clock, sw, newStale(t, 8)) // not StaleShared
	keyer, err := middleware.NewKeyer(middleware.MissingKey{}, middleware.KeyByHeader("X-Api-Key"))
	require.NoError(t, err)
	h := mw(t, WithGuard(g), WithKeyer(keyer))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		"another client, without StaleShared, has no copy of its own; it got %q", rec.Body.String())
}

// A 5xx held back at WriteHeader for a copy young then (50 s) is answered
// by that copy when the handler returns, though 20 s more have passed: the
// client gets the copy, not a 502 stripped of the handler's body.
func TestAHeldFailureIsAnsweredAtTheInstantItWasHeld(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	cache := newStale(t, 8) // maxAge: one minute
	g := guardWith(t, clock, testpolicy.NewCounter(), cache)
	n := 0
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n++
		if n == 1 {
			_, _ = io.WriteString(w, "prices v1")
			return
		}
		w.WriteHeader(http.StatusBadGateway)
		clock.Advance(20 * time.Second) // the error body comes slowly
		_, _ = io.WriteString(w, "upstream prices-db refused the connection")
	}))
	require.Equal(t, "prices v1", serve(h, http.MethodGet, "/prices").Body.String())
	clock.Advance(50 * time.Second)
	rec := serve(h, http.MethodGet, "/prices") // copy 50 s old at the 502, 70 s at the return
	if rec.Code == http.StatusOK {
		assert.Equal(t, "prices v1", rec.Body.String())
		return
	}
	require.Equal(t, http.StatusBadGateway, rec.Code)
	assert.Equal(t, "upstream prices-db refused the connection", rec.Body.String(),
		"the 5xx was held for a copy that then declined: the handler's own body is lost")
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
