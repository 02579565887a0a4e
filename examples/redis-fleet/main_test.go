package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/internal/redistest"
)

// TestMain lets the test binary be started again as an instance, as the
// program is.
func TestMain(m *testing.M) {
	if name := os.Getenv(envInstance); name != "" {
		os.Exit(instanceMain(name, os.Getenv(envRedis), os.Stdin, os.Stdout))
	}
	goleak.VerifyTestMain(m)
}

// fastExit spares the instances, race-enabled test binaries, the race
// detector's default second of sleep at exit; a race they find still makes
// them exit with an error, which fails the test.
func fastExit(t *testing.T) { t.Setenv("GORACE", "atexit_sleep_ms=0") }

func TestDemonstration(t *testing.T) {
	redistest.Binary(t) // fails in CI, skips elsewhere, when redis-server is missing
	fastExit(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	got := out.String()
	part1, part2, ok := strings.Cut(got, "2. Redis stops")
	require.True(t, ok, got)

	// The two instances share one budget of 6: six admitted in all, then
	// refused, whichever instance is asked.
	assert.Equal(t, 6, strings.Count(part1, "-> 200"), got)
	assert.Regexp(t, `   A /local  alice -> 429  RateLimit: "fleet/local";r=0;t=\d+  Retry-After: \d+\n`+
		`   B /local  alice -> 429  RateLimit: "fleet/local";r=0;t=\d+  Retry-After: \d+\n`, part1)

	// Redis gone: the local share admits 3 on A, then refuses; B has its own
	// share.
	local := regexp.MustCompile(`(?m)^   ([AB]) /local  bob   -> (\d+)`).FindAllStringSubmatch(part2, -1)
	require.Len(t, local, 5, got)
	var codes []string
	for _, m := range local {
		codes = append(codes, m[1]+m[2])
	}
	assert.Equal(t, []string{"A200", "A200", "A200", "A429", "B200"}, codes, got)
	assert.Contains(t, part2, "A /local  bob   -> 429  RateLimit: \"fleet/local\";r=0;t=")
	// Fail open admits, fail closed refuses with 503.
	assert.Contains(t, part2, "   A /open   bob   -> 200\n   B /open   bob   -> 200\n")
	assert.Regexp(t, `   A /closed bob   -> 503  Retry-After: \d+\n   B /closed bob   -> 503  Retry-After: \d+\n`, part2)
}

func TestServeStopsWithItsContext(t *testing.T) {
	redistest.Binary(t)
	fastExit(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	require.NoError(t, serveUntil(ctx, "", &out))
	assert.Regexp(t, `redis-server on 127.0.0.1:\d+\ninstance A on http://127.0.0.1:\d+ .*\ninstance B on http://127.0.0.1:\d+ `, out.String())
}
