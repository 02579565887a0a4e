package sluicehttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redistest"
	"github.com/sluice-go/sluice/middleware"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/ratelimit"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
)

// policyHeaderOf serves one request through a Guard of p alone and returns
// its RateLimit-Policy field.
func policyHeaderOf(t *testing.T, p sluice.Policy) string {
	t.Helper()
	g, err := sluice.New(sluice.With(p), sluice.WithClock(sluice.NewManualClock(time.Hour)))
	require.NoError(t, err)
	routes, err := middleware.NewRoutes(middleware.RouteTo("GET /items", g))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "[]") })
	mw, err := sluicehttp.Middleware(sluicehttp.WithRoutes(routes))
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	mw(mux).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/items", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Header().Get("RateLimit-Policy")
}

// The same limit, 3 per second with a burst of 3, is told to clients as
// q=3;w=1 by the local GCRA and token bucket and by their Redis twins.
func TestARedisLimitIsToldAsItsLocalTwin(t *testing.T) {
	s := redistest.Start(t) // fails under CI=true without redis-server
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	r := ratelimit.PerSecond(3)
	lg, err := ratelimit.NewGCRA(r, 3, ratelimit.WithName("items"))
	require.NoError(t, err)
	rg, err := redislimit.NewGCRA(c, r, 3, redislimit.WithName("items"), redislimit.WithTimeout(5*time.Second))
	require.NoError(t, err)
	ltb, err := ratelimit.NewTokenBucket(r, 3, ratelimit.WithName("items"))
	require.NoError(t, err)
	rtb, err := redislimit.NewTokenBucket(c, r, 3, redislimit.WithName("items"), redislimit.WithTimeout(5*time.Second))
	require.NoError(t, err)
	local := policyHeaderOf(t, lg)
	assert.Equal(t, `"items";q=3;w=1`, local)
	assert.Equal(t, local, policyHeaderOf(t, rg), "redis GCRA")
	assert.Equal(t, policyHeaderOf(t, ltb), policyHeaderOf(t, rtb), "token bucket")
}
