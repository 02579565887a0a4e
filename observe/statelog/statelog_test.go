package statelog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/redistest"
	"github.com/sluice-go/sluice/observe/statelog"
	"github.com/sluice-go/sluice/ratelimit"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
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
	// It goes to the flap's last change, the state the breaker stayed in
	// for that minute; the 7 before it are counted.
	assert.Equal(t, "sluice: circuit breaker closed", got[0]["msg"])
	assert.Equal(t, float64(7), got[0]["suppressed"], "the changes left out are counted")
}

func TestNewRefusesBadInput(t *testing.T) {
	_, err := statelog.New(nil)
	assert.ErrorContains(t, err, "nil *slog.Logger")
	_, err = statelog.New(slog.Default(), statelog.WithLimit(0, time.Second))
	assert.ErrorContains(t, err, "positive")
	_, err = statelog.New(slog.Default(), statelog.WithClock(nil))
	assert.ErrorContains(t, err, "nil clock")
}

// A Redis limiter's breaker around Redis is logged as its failure policy
// engaging while Redis does not answer, and recovering once it does.
func TestRedisFailurePolicyEngagedAndRecovered(t *testing.T) {
	server := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: server.Addr, ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, err := redislimit.NewGCRA(client, ratelimit.PerSecond(1000), 1000, redislimit.WithName("redis/api"),
		redislimit.WithTimeout(100*time.Millisecond), redislimit.WithBreaker(1, 50*time.Millisecond))
	require.NoError(t, err)
	var buf bytes.Buffer
	logs, err := statelog.New(slog.New(slog.NewJSONHandler(&buf, nil)), statelog.WithLimit(100, time.Second))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(limiter), sluice.WithObserver(logs))
	require.NoError(t, err)
	defer g.Close()
	ctx := sluice.WithKey(context.Background(), "user")
	ok := func(context.Context) error { return nil }

	require.NoError(t, server.Pause()) // Redis stops answering
	require.NoError(t, g.Do(ctx, ok), "fail open")
	require.NoError(t, server.Resume())
	// The breaker lets a probe through 50 ms after it opened: call until
	// one has closed it, for a bounded while.
	var got []map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		require.NoError(t, g.Do(ctx, ok))
		got = append(got, records(t, &buf)...)
		if n := len(got); n > 0 && got[n-1]["to"] == "closed" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// On a loaded machine a probe may time out and open the breaker again
	// before one closes it: engaged first, tried again before each
	// outcome, recovered last.
	require.GreaterOrEqual(t, len(got), 3)
	assert.Equal(t, map[string]any{"level": "WARN", "msg": "sluice: Redis failure policy engaged",
		"sluice.guard": "api", "sluice.policy": "redis/api", "from": "closed", "to": "open"}, got[0])
	assert.Equal(t, "sluice: Redis tried again", got[len(got)-2]["msg"])
	last := got[len(got)-1]
	assert.Equal(t, "sluice: Redis failure policy recovered", last["msg"])
	assert.Equal(t, "INFO", last["level"])
}
