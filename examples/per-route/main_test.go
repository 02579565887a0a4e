package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
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
