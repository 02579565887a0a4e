package statelog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/observe/statelog"
)

func records(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(buf)
	for dec.More() {
		var m map[string]any
		require.NoError(t, dec.Decode(&m))
		delete(m, "time")
		out = append(out, m)
	}
	return out
}

func TestAFlappingBreakerIsLoggedWithinTheLimit(t *testing.T) {
	var buf bytes.Buffer
	clk := sluice.NewManualClock(time.Second)
	logs, err := statelog.New(slog.New(slog.NewJSONHandler(&buf, nil)),
		statelog.WithLimit(2, time.Minute), statelog.WithClock(clk))
	require.NoError(t, err)
	br, err := breaker.New("payments", breaker.WithConsecutiveFailures(1), breaker.WithClock(clk))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(br), sluice.WithClock(clk), sluice.WithObserver(logs))
	require.NoError(t, err)
	defer g.Close()

	ctx := context.Background()
	flap := func() { // open, then closed again at once
		_ = g.Do(ctx, func(context.Context) error { return errors.New("down") })
		br.Reset()
	}
	for range 5 {
		flap()
	}
	got := records(t, &buf)
	require.Len(t, got, 2, "10 changes, 2 records")
	assert.Equal(t, map[string]any{"level": "WARN", "msg": "sluice: circuit breaker opened",
		"sluice.guard": "api", "sluice.policy": "breaker/payments", "from": "closed", "to": "open"}, got[0])
	assert.Equal(t, "sluice: circuit breaker closed", got[1]["msg"])

	clk.Advance(time.Minute) // one more record allowed
	flap()
	got = records(t, &buf)
	require.Len(t, got, 1)
	assert.Equal(t, "sluice: circuit breaker opened", got[0]["msg"])
	assert.Equal(t, float64(8), got[0]["suppressed"], "the changes left out are counted")
}

func TestNewRefusesBadInput(t *testing.T) {
	_, err := statelog.New(nil)
	assert.ErrorContains(t, err, "nil *slog.Logger")
	_, err = statelog.New(slog.Default(), statelog.WithLimit(0, time.Second))
	assert.ErrorContains(t, err, "positive")
	_, err = statelog.New(slog.Default(), statelog.WithClock(nil))
	assert.ErrorContains(t, err, "nil clock")
}
