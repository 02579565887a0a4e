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
