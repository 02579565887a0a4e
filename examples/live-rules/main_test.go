package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/rules"
)

func TestDemonstration(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	got := out.String()

	// Each edit is seen, by the watcher, within a second of the write.
	seen := regexp.MustCompile(`seen (\d+)ms after the write`).FindAllStringSubmatch(got, -1)
	require.Len(t, seen, 3, got)
	for _, s := range seen {
		assert.Less(t, len(s[1]), 4, "seen within a second: %s", s[0])
	}
	parts := strings.Split(got, "\n-- edit ")
	require.Len(t, parts, 4, got)
	assert.Contains(t, parts[0], "GET /items ×10 -> 10 × 200\n")
	assert.Contains(t, parts[1], "version 2 (")
	assert.Contains(t, parts[1], "  policy per-client: rate 1000/1s → 1/1m0s, burst 100 → 5 (in place)\n")
	assert.Contains(t, parts[1], "GET /items ×10 -> 5 × 200, 5 × 429\n")
	assert.Contains(t, parts[2], "reload failed, version 2 stays in force:\n")
	assert.Contains(t, parts[2], "rules.yaml:10:15: rate: the count -1 is not positive")
	assert.Contains(t, parts[2], `rules.yaml:13:9: policy "orders": unknown kind "braker"`)
	assert.Contains(t, parts[2], "GET /items ×10 -> 10 × 429\n")
	assert.Contains(t, parts[3], "version 3 (")
	assert.Contains(t, parts[3], "  policy per-client: shadow\n")
	assert.Contains(t, parts[3], "GET /items ×10 -> 10 × 200 (per-client would have rejected 10 so far, in shadow mode)\n")
}

func TestTheRulesFileBesideTheExampleLoads(t *testing.T) {
	l, err := rules.New(filepath.Join(".", "rules.yaml"))
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

func TestServeStopsWithItsContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	require.NoError(t, serveUntil(ctx, "rules.yaml", "127.0.0.1:0", &out))
	assert.Contains(t, out.String(), "listening on http://127.0.0.1:")
	assert.Error(t, serveUntil(ctx, "", "127.0.0.1:0", &out))
}
