package sluicehttp

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

// onlyReader hides strings.Reader's WriteTo: io.Copy calls ReadFrom.
type onlyReader struct{ io.Reader }

// As in the Echo adapter: an empty io.Copy records no 200 that never went
// out; the handler's 404 that follows counts for what it is, and its body
// is no stale 200 copy.
func TestHTTPEmptyReadFromRecordsNoStatus(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	sw := openSwitch()
	cache := newStale(t, 2)
	g := guardWith(t, clock, sw, cache)
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.Copy(w, onlyReader{strings.NewReader("")})
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, "no such item")
	}))
	rec := serve(h, http.MethodGet, "/item")
	require.Equal(t, http.StatusNotFound, rec.Code)
	assert.Zero(t, cache.Len(), "a 404 was kept as a stale 200 copy")
	sw.on = true
	rec = serve(h, http.MethodGet, "/item")
	assert.NotEqual(t, http.StatusOK, rec.Code, "the 404's body served as a 200: %q", rec.Body.String())
}
