package rules

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/redistest"
	"github.com/sluice-go/sluice/ratelimit"
)

// idle_ttl reaches the per-key limiter, whose check refuses one shorter than
// its limiters take to be whole again; idle_ttl without per_key is refused
// with its place.
func TestIdleTTLReachesAPerKeyPolicy(t *testing.T) {
	const head = "guards:\n  api:\n    key: {header: X-User}\n    policies:\n"
	l, err := loadFile(t, "rules.yaml", head+"      - {name: u, kind: fixed-window, limit: 1, window: 1s, per_key: true, idle_ttl: 1s}\ndefault: api\n")
	require.NoError(t, err)
	g, ok := l.Guard("api")
	require.True(t, ok)
	k, ok := g.Policies()[0].(*ratelimit.Keyed)
	require.True(t, ok)
	h := serve(t, l)
	assert.Equal(t, []int{200, 429}, statuses(h, "/x", 2, "X-User", "alice"))
	assert.Equal(t, 1, k.Len())

	_, err = loadFile(t, "rules.yaml", head+"      - {name: u, kind: fixed-window, limit: 1, window: 1m, per_key: true, idle_ttl: 1s}\ndefault: api\n")
	require.Error(t, err)
	assert.ErrorContains(t, err, "idle TTL of 1s")
	_, err = loadFile(t, "rules.yaml", head+"      - {name: u, kind: fixed-window, limit: 1, window: 1s, idle_ttl: 1s}\ndefault: api\n")
	assert.ErrorContains(t, err, "rules.yaml:5:")
	assert.ErrorContains(t, err, "idle_ttl needs per_key: true")
}

// fail: local, with instances, makes a Redis limit decide with this
// instance's share while Redis is unreachable; each needs the other.
func TestFailLocalDecidesWithTheInstancesShare(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true, DialTimeout: 100 * time.Millisecond})
	defer client.Close()
	const head = "guards:\n  api:\n    key: {header: X-Tenant}\n    policies:\n"
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, head+"      - {name: fleet, kind: fixed-window, limit: 4, window: 1m, store: redis, fail: local, instances: 2}\ndefault: api\n")
	l, err := New(path, WithLogger(quietLog), WithRedis(client))
	require.NoError(t, err)
	defer l.Close()
	assert.Equal(t, []int{200, 200, 429}, statuses(serve(t, l), "/x", 3, "X-Tenant", "acme"), "a share of 4 / 2")

	for _, body := range []string{
		"      - {name: fleet, kind: fixed-window, limit: 4, window: 1m, store: redis, fail: local}\n",
		"      - {name: fleet, kind: fixed-window, limit: 4, window: 1m, store: redis, fail: open, instances: 2}\n",
	} {
		_, err := loadFile(t, "rules.yaml", head+body+"default: api\n")
		assert.ErrorContains(t, err, "fail: local and instances go together", body)
	}
}

// A client sending the key "unknown" does not draw on the bucket every
// request without a key shares, on a guard whose missing key is shared.
func TestAClientKeyedAsTheSharedKeyHasItsOwnBucket(t *testing.T) {
	l, err := loadFile(t, "rules.yaml", "guards:\n  api:\n    key: {header: X-Api-Key}\n    policies:\n"+
		"      - {name: u, kind: fixed-window, limit: 1, window: 1h, per_key: true}\ndefault: api\n")
	require.NoError(t, err)
	h := serve(t, l)
	assert.Equal(t, []int{200, 429}, statuses(h, "/x", 2), "the requests without a key share one bucket")
	assert.Equal(t, []int{200, 429}, statuses(h, "/x", 2, "X-Api-Key", "unknown"), "a client keyed unknown")
	assert.Equal(t, []int{200}, statuses(h, "/x", 1, "X-Api-Key", "~unknown"), "and one keyed ~unknown")
}
