package otelmetrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redistest"
	"github.com/sluice-go/sluice/ratelimit"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
)

// A Redis limiter's breaker around Redis is no circuit breaker of the
// Guard: its opening is reported by sluice.redis.*, not counted as a
// circuit breaker's transition, or an alert on those would fire for a rate
// limiter whose Redis hiccuped.
func TestARedisLimitersBreakerIsNoCircuitBreakerOfTheGuard(t *testing.T) {
	m, reader := newReader(t)
	client := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	l, err := redislimit.NewGCRA(client, ratelimit.PerSecond(10), 10, redislimit.WithName("redis/api"),
		redislimit.WithTimeout(time.Second), redislimit.WithBreaker(1, time.Hour), redislimit.WithFailOpen())
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(l), sluice.WithObserver(m))
	require.NoError(t, err)
	defer g.Close()
	_ = g.Do(sluice.WithKey(t.Context(), "user"), func(context.Context) error { return nil })

	assert.Empty(t, points(t, reader, "sluice.circuit_breaker.state"), "a rate limiter has no breaker state")
	assert.Empty(t, points(t, reader, "sluice.circuit_breaker.transitions"),
		"the Redis limiter's breaker around Redis")
}

// failingObserver refuses every Guard, as an observer may.
type failingObserver struct{}

func (failingObserver) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return nil, nil, errors.New("refused")
}

// A Guard that sluice.New refused (a later observer failed) never served
// and was never returned: it is not reported, nor held.
func TestAGuardNewRefusedIsNotReported(t *testing.T) {
	m, reader := newReader(t)
	limit, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1, ratelimit.WithName("ratelimit/typo"))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("typo"), sluice.With(limit), sluice.WithObserver(m), sluice.WithObserver(failingObserver{}))
	require.Error(t, err)
	require.Nil(t, g)
	for i := range 5 {
		assert.Empty(t, points(t, reader, "sluice.requests"), "collection %d reports a Guard New refused", i)
	}
}
