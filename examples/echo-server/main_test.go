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

	// The fifth request of one client is over its budget.
	assert.Contains(t, got, "GET  /hello           203.0.113.7   -> 429  Retry-After: 1  RateLimit: \"ratelimit/per-ip\";r=0;t=1")
	assert.Contains(t, got, `{"type":"urn:sluice:problem:rate-limited","title":"Too Many Requests","status":429`)
	// The breakers open on the handlers' 502 errors: /orders/:id is answered
	// with the standard 503, /recommendations by its degraded list.
	assert.Contains(t, got, "[breaker/orders: closed -> open]")
	assert.Contains(t, got, "GET  /orders/9        192.0.2.10    -> 503  Retry-After: 1\n     {\"type\":\"urn:sluice:problem:circuit-open\"")
	assert.Contains(t, got, "[breaker/recommendations: closed -> open]")
	assert.Contains(t, got, "-> 200  X-Degraded: circuit-open\n     {\"degraded\":true,\"items\":[\"bestseller-1\",\"bestseller-2\"]}")
	// Both close again once the upstream heals.
	assert.Contains(t, got, "GET  /orders/9        192.0.2.12    -> 200")
	assert.Contains(t, got, "[breaker/orders: half-open -> closed]")
	assert.Contains(t, got, "[breaker/recommendations: half-open -> closed]")
}

func TestServeStopsWithItsContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	require.NoError(t, serveUntil(ctx, "127.0.0.1:0", &out))
	assert.Contains(t, out.String(), "listening on http://127.0.0.1:")
}
