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
