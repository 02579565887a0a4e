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

	// The slow dependency: two calls hold the bulkhead's slots until their
	// timeout, the two others are turned away; the timeouts open the
	// breaker, and the next call is not sent.
	assert.Contains(t, got, "  2 × timed out after 100ms\n  2 × not sent: concurrency-limited by bulkhead/inventory.internal\n")
	assert.Regexp(t, `\[breaker/inventory.internal: closed -> open\]\n.*\n`+
		`GET http://inventory.internal/stock -> not sent: circuit-open by breaker/inventory.internal, retry after (200|1\d\d)ms   \(dependency saw 3 calls\)`, got)
	// It recovers through a probe.
	assert.Contains(t, got, "-> 200 stock=12   (dependency saw 4 calls)\n"+
		"    [breaker/inventory.internal: open -> half-open]\n"+
		"    [breaker/inventory.internal: half-open -> closed]\n")
	// Two failures in a row open it; the next call is not sent.
	assert.Regexp(t, `-> 500 internal error   \(dependency saw 6 calls\)\n`+
		`    \[breaker/inventory.internal: closed -> open\]\n`+
		`GET http://inventory.internal/stock -> not sent: circuit-open by breaker/inventory.internal, retry after (200|1\d\d)ms   \(dependency saw 6 calls\)\n`, got)
	// The dependency's Retry-After holds the breaker open for that long,
	// though the dependency itself is healthy again.
	assert.Regexp(t, `-> 503 busy  Retry-After: 1   \(dependency saw 8 calls\)\n`+
		`    \[breaker/inventory.internal: closed -> open\]\n`+
		`GET http://inventory.internal/stock -> not sent: circuit-open by breaker/inventory.internal, retry after (1s|9\d0ms)   \(dependency saw 8 calls\)\n`+
		`   one second later:\n`+
		`GET http://inventory.internal/stock -> 200 stock=12   \(dependency saw 9 calls\)\n`, got)
}

func TestServeStopsWithItsContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	require.NoError(t, serveUntil(ctx, "127.0.0.1:0", &out))
	assert.Contains(t, out.String(), "frontend on http://127.0.0.1:")
}
