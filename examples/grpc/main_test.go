package main

import (
	"bytes"
	"context"
	"regexp"
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

	// The server's rate limit answers ResourceExhausted with RetryInfo and the
	// RateLimit metadata in its trailers; the client's breaker then holds the next call back without sending it: the
	// server's count does not move.
	m := regexp.MustCompile(`Check -> ResourceExhausted  RetryInfo: \d+ms  ErrorInfo: RATE_LIMITED by ratelimit/check   \(server saw (\d+) calls\)\n` +
		`         ratelimit: "ratelimit/check";r=0;t=1\n` +
		`Check -> Unavailable  RetryInfo: \d+ms  ErrorInfo: CIRCUIT_OPEN by breaker/backend   \(server saw (\d+) calls\)`).
		FindStringSubmatch(got)
	require.Len(t, m, 3, got)
	assert.Equal(t, m[1], m[2], "the call held back by the client reached the server:\n%s", got)

	// Timeouts open the client's breaker, which fails fast, then recovers.
	assert.Regexp(t, `(?s)Check -> DeadlineExceeded.*Check -> DeadlineExceeded.*`+
		`Check -> Unavailable  RetryInfo: \d+ms  ErrorInfo: CIRCUIT_OPEN by breaker/backend.*`+
		`\[client breaker/backend: half-open -> closed\]\nCheck -> OK SERVING`, got)

	// A stream sees the status change; a third one is shed by the load guard.
	assert.Contains(t, got, "Watch#1 <- SERVING\nWatch#1 <- NOT_SERVING\nWatch#1 <- SERVING\nWatch#2 <- SERVING\n")
	assert.Regexp(t, `Watch#3 -> Unavailable  RetryInfo: \d+ms  ErrorInfo: CONCURRENCY_LIMITED by bulkhead/server`, got)
}

func TestServeStopsWithItsContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	require.NoError(t, serveUntil(ctx, "127.0.0.1:0", &out))
	assert.Contains(t, out.String(), "serving grpc.health.v1.Health on 127.0.0.1:")
}
