package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/examples/internal/apikey"
	"github.com/sluice-go/sluice/middleware"
)

func TestDemonstration(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	got := out.String()

	// /search: five for alice, then 429 with the search policy's fields.
	assert.Equal(t, 5, strings.Count(got, "GET  /search?q=kettle  alice    -> 200  RateLimit-Policy: \"ratelimit/search\";q=5"), got)
	assert.Contains(t, got, "GET  /search?q=kettle  alice    -> 429  RateLimit-Policy: \"ratelimit/search\";q=5;w=10  RateLimit: \"ratelimit/search\";r=0;t=10  Retry-After: 10\n"+
		"     {\"type\":\"urn:sluice:problem:rate-limited\"")
	// /checkout: its own limit, counted apart from /search.
	assert.Equal(t, 2, strings.Count(got, "POST /checkout         alice    -> 201  RateLimit-Policy: \"ratelimit/checkout\";q=2"), got)
	assert.Contains(t, got, "POST /checkout         alice    -> 429  RateLimit-Policy: \"ratelimit/checkout\";q=2;w=60  RateLimit: \"ratelimit/checkout\";r=0;t=30  Retry-After: 30\n")
	// Another caller, the default route, and the skipped health check.
	assert.Contains(t, got, "GET  /search?q=kettle  bob      -> 200  RateLimit-Policy: \"ratelimit/search\";q=5;w=10  RateLimit: \"ratelimit/search\";r=4;t=10\n")
	assert.Contains(t, got, "GET  /about            (no key) -> 200  RateLimit-Policy: \"ratelimit/instance\";q=100;w=1  RateLimit")
	assert.Contains(t, got, "GET  /healthz ×20 -> 20 × 200, 0 with RateLimit fields\n")
}

func TestServeStopsWithItsContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	require.NoError(t, serveUntil(ctx, "127.0.0.1:0", &out))
	assert.Contains(t, out.String(), "listening on http://127.0.0.1:")
}

func TestCallersAreAuthenticatedAndKeysNamespaced(t *testing.T) {
	h, routes, err := newHandler()
	require.NoError(t, err)
	defer closeAll(routes)
	checkout := func(remote, apiKey string) int {
		r := httptest.NewRequest(http.MethodPost, "/checkout", nil)
		r.RemoteAddr = remote
		if apiKey != "" {
			r.Header.Set("X-Api-Key", apiKey)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	// A made-up key, or one named like someone's address, is no identity.
	for i := range 5 {
		assert.Equal(t, http.StatusUnauthorized, checkout("198.51.100.9:1234", fmt.Sprint("made-up-", i)))
		assert.Equal(t, http.StatusUnauthorized, checkout("198.51.100.9:1234", "203.0.113.7"))
	}
	assert.Equal(t, http.StatusCreated, checkout("203.0.113.7:5555", ""))
	// IPv6 clients are counted per /64.
	assert.Equal(t, http.StatusCreated, checkout("[2001:db8:1:2::1]:443", ""))
	assert.Equal(t, http.StatusCreated, checkout("[2001:db8:1:2::2]:443", ""))
	assert.Equal(t, http.StatusTooManyRequests, checkout("[2001:db8:1:2::3]:443", ""))
}

func TestNamespacedBoundsKeys(t *testing.T) {
	long := strings.Repeat("x", 10_000)
	fn := apikey.Namespaced("caller:", func(middleware.Request) (string, bool) { return long, true })
	key, ok := fn(nil)
	require.True(t, ok)
	assert.Equal(t, "caller:sha256:", key[:len("caller:sha256:")])
	assert.Len(t, key, len("caller:sha256:")+64)
	fn = apikey.Namespaced("ip:", func(middleware.Request) (string, bool) { return "192.0.2.1", true })
	key, _ = fn(nil)
	assert.Equal(t, "ip:192.0.2.1", key)
}
