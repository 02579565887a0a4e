package main

import (
	"bytes"
	"context"
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

	// The fifth request of one client is over its budget; another client
	// still has a whole bucket.
	assert.Contains(t, got, "GET  /hello           203.0.113.7   -> 429  Retry-After: 1  RateLimit: \"ratelimit/per-ip\";r=0;t=1")
	assert.Contains(t, got, `{"type":"urn:sluice:problem:rate-limited","title":"Too Many Requests","status":429`)
	assert.Contains(t, got, "GET  /hello           198.51.100.2  -> 200")
	// The breakers open on the upstream's 502s; the fallbacks answer.
	assert.Contains(t, got, "[breaker/prices: closed -> open]")
	assert.Contains(t, got, "GET  /prices          192.0.2.10    -> 200  Age: 0")
	assert.Contains(t, got, "[breaker/recommendations: closed -> open]")
	assert.Contains(t, got, "-> 200  X-Degraded: circuit-open\n     {\"items\":[\"bestseller-1\",\"bestseller-2\"],\"degraded\":true}")
	// And close again once the upstream heals.
	assert.Contains(t, got, "[breaker/prices: half-open -> closed]")
	assert.Contains(t, got, "[breaker/recommendations: half-open -> closed]")
	assert.Contains(t, got, "GET  /recommendations 192.0.2.12    -> 200  RateLimit")
}

func TestServeStopsWithItsContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	require.NoError(t, serveUntil(ctx, "127.0.0.1:0", &out))
	assert.Contains(t, out.String(), "listening on http://127.0.0.1:")
}
