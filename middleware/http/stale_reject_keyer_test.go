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
)

// With a Keyer that rejects keyless requests, every key it finds is a
// client's: a stale copy serves that key on any connection, as
// NewStaleCache documents ("the API key a Keyer finds"). The client whose
// API key happens to be "unknown" is no exception: no request of this
// Keyer is ever keyed "unknown" for want of a key.
func TestARejectingKeyersClientKeyedUnknownKeepsItsCopies(t *testing.T) {
	keyer, err := middleware.NewKeyer(middleware.RejectMissingKey(), middleware.KeyByHeader("X-Api-Key"))
	require.NoError(t, err)
	for _, apiKey := range []string{"alice", "unknown"} {
		sw := openSwitch()
		g := guardWith(t, sluice.NewManualClock(time.Hour), sw, newStale(t, 8))
		h := mw(t, WithKeyer(keyer), WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "account of "+r.Header.Get("X-Api-Key"))
		}))
		from := func(addr string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodGet, "/me", nil)
			r.RemoteAddr = addr
			r.Header.Set("X-Api-Key", apiKey)
			h.ServeHTTP(rec, r)
			return rec
		}
		require.Equal(t, "account of "+apiKey, from("192.0.2.1:1000").Body.String())
		sw.on = true
		rec := from("198.51.100.9:2000")
		assert.Equal(t, http.StatusOK, rec.Code, "key %q on another connection: %q", apiKey, rec.Body.String())
		assert.Equal(t, "account of "+apiKey, rec.Body.String(), "key %q", apiKey)
	}
}
