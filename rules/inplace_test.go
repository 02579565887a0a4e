package rules

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/ratelimit"
)

// oneGuard is a rules file of one guard, the default, with policy p.
func oneGuard(p string) string {
	return fmt.Sprintf("guards:\n  api:\n    key: {header: X-Key}\n    policies:\n      - %s\ndefault: api\n", p)
}

func TestEveryKindTakesNewNumbersInPlace(t *testing.T) {
	for _, tc := range []struct{ from, to string }{
		{"{name: p, kind: token-bucket, rate: 1/s, burst: 3}", "{name: p, kind: token-bucket, rate: 2/s, burst: 4}"},
		{"{name: p, kind: gcra, rate: 1/s, burst: 3}", "{name: p, kind: gcra, rate: 2/s, burst: 4}"},
		{"{name: p, kind: leaky-bucket, rate: 1/s, capacity: 3}", "{name: p, kind: leaky-bucket, rate: 1/s, capacity: 5}"},
		{"{name: p, kind: fixed-window, limit: 3, window: 1s}", "{name: p, kind: fixed-window, limit: 5, window: 2s}"},
		{"{name: p, kind: sliding-window, limit: 3, window: 1s}", "{name: p, kind: sliding-window, limit: 5, window: 1s, buckets: 5}"},
		{"{name: p, kind: sliding-log, limit: 3, window: 1s}", "{name: p, kind: sliding-log, limit: 4, window: 1s}"},
		{"{name: p, kind: warm-up, rate: 10/s, burst: 10, warm_up: 10s, cold_factor: 3}", "{name: p, kind: warm-up, rate: 20/s, burst: 10, warm_up: 5s, cold_factor: 3}"},
		{"{name: p, kind: shaper, rate: 10/s, max_wait: 1s}", "{name: p, kind: shaper, rate: 20/s, max_wait: 2s}"},
		{"{name: p, kind: breaker, consecutive_failures: 3}", "{name: p, kind: breaker, consecutive_failures: 5, open_for: 10s}"},
		{"{name: p, kind: throttle}", "{name: p, kind: throttle, multiplier: 1.5, min_requests: 20, window: 30s}"},
		{"{name: p, kind: shedder}", "{name: p, kind: shedder, queue: 10, max_wait: 50ms}"},
		{"{name: p, kind: bulkhead, limit: 4}", "{name: p, kind: bulkhead, limit: 8}"},
		{"{name: p, kind: shed}", "{name: p, kind: shed, on: true}"},
		{"{name: p, kind: token-bucket, rate: 1/s, burst: 3, per_key: true}", "{name: p, kind: token-bucket, rate: 5/s, burst: 3, per_key: true}"},
		{"{name: p, kind: fixed-window, limit: 2, window: 1h, per_key: true}", "{name: p, kind: fixed-window, limit: 2, window: 1h, per_key: true, max_keys: 200}"},
	} {
		t.Run(strings.Fields(tc.from)[3], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, path := newLoader(t, oneGuard(tc.from))
				g, _ := l.Guard("api")
				before := g.Policies()[0]
				writeRules(t, path, oneGuard(tc.to))
				require.NoError(t, l.Reload())
				g2, _ := l.Guard("api")
				assert.Same(t, g, g2)
				assert.Same(t, before, g2.Policies()[0])
				require.Len(t, l.Status().Changes, 1)
				assert.Contains(t, l.Status().Changes[0], "(in place)")
			})
		})
	}
}

func TestABulkheadGainingAQueueIsRebuilt(t *testing.T) {
	l, path := newLoader(t, oneGuard("{name: p, kind: bulkhead, limit: 4}"))
	writeRules(t, path, oneGuard("{name: p, kind: bulkhead, limit: 4, queue: 5, max_wait: 1s}"))
	require.NoError(t, l.Reload())
	assert.Equal(t, []string{
		"policy p: rebuilt: max_wait 0s → 1s, queue 0 → 5 (its kind cannot change this in place)",
		"guard api: rebuilt",
	}, l.Status().Changes)
}

// A breaker keeps its open state through a reload that leaves it be, and
// through one that changes its numbers.
func TestABreakerKeepsItsOpenState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, path := newLoader(t, breakerRules)
		mw, err := l.HTTP()
		require.NoError(t, err)
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
		assert.Equal(t, []int{502, 503}, statuses(h, "/pay", 2))
		writeRules(t, path, strings.Replace(breakerRules, "burst: 100", "burst: 50", 1))
		require.NoError(t, l.Reload())
		assert.Equal(t, []int{503}, statuses(h, "/pay", 1))
		writeRules(t, path, strings.Replace(breakerRules, "consecutive_failures: 1, open_for: 1m", "consecutive_failures: 2, open_for: 2m", 1))
		require.NoError(t, l.Reload())
		g, _ := l.Guard("pay")
		assert.Equal(t, breaker.StateOpen, g.Policies()[0].(*breaker.Breaker).State())
		assert.Equal(t, []int{503}, statuses(h, "/pay", 1))
	})
}

// counting is an observer that lets the Guards keep their counters.
type counting struct{}

func (counting) Attach(*sluice.Guard) (func(ctx context.Context, e sluice.CallEvent), func(), error) {
	return nil, nil, nil
}

func TestShadowFromTheFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rules = `
guards:
  api:
    policies:
      - {name: tight, kind: fixed-window, limit: 2, window: 1m, shadow: true}
default: api
`
		l, path := newLoader(t, rules, WithGuardOptions(func(string) []sluice.Option {
			return []sluice.Option{sluice.WithObserver(counting{})}
		}))
		h := serve(t, l)
		assert.Equal(t, []int{200, 200, 200, 200}, statuses(h, "/x", 4), "shadowed: nothing rejected")
		g, _ := l.Guard("api")
		assert.Equal(t, "api", g.Name())
		assert.Equal(t, uint64(2), g.Stats().Policies[0].ShadowRejected)

		// Enforcing from the next load on, with the same window's count.
		writeRules(t, path, strings.Replace(rules, "shadow: true", "shadow: false", 1))
		require.NoError(t, l.Reload())
		assert.Equal(t, []string{"policy tight: enforcing"}, l.Status().Changes)
		assert.Equal(t, []int{429}, statuses(h, "/x", 1))

		// The whole guard in shadow mode.
		writeRules(t, path, strings.Replace(rules, "shadow: true}", "}\n    shadow: true", 1))
		require.NoError(t, l.Reload())
		assert.Equal(t, []string{"guard api: shadow"}, l.Status().Changes)
		assert.Equal(t, []int{200}, statuses(h, "/x", 1))
		g2, _ := l.Guard("api")
		assert.Same(t, g, g2, "a change of shadow modes keeps the Guard and its counters")
	})
}

// unique is an observer that, as the metrics exporters do, refuses a
// second Guard of a name it reports already, until the first lets go.
type unique struct{ names map[string]bool }

func (u *unique) Attach(g *sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	if u.names[g.Name()] {
		return nil, nil, fmt.Errorf("guard %q is reported already", g.Name())
	}
	u.names[g.Name()] = true
	return nil, func() { delete(u.names, g.Name()) }, nil
}

func TestARebuiltGuardLetsItsObserversGoFirst(t *testing.T) {
	u := &unique{names: map[string]bool{}}
	l, path := newLoader(t, twoLimits, WithGuardOptions(func(string) []sluice.Option {
		return []sluice.Option{sluice.WithObserver(u)}
	}))
	assert.Equal(t, map[string]bool{"items": true, "cart": true}, u.names)
	writeRules(t, path, strings.Replace(twoLimits, "kind: fixed-window, limit: 1", "kind: sliding-log, limit: 5", 1))
	require.NoError(t, l.Reload())
	assert.Contains(t, l.Status().Changes, "guard cart: rebuilt")
	assert.Equal(t, map[string]bool{"items": true, "cart": true}, u.names)

	// A guard gone from the file is closed.
	writeRules(t, path, strings.Replace(strings.Replace(twoLimits, `  - {route: "GET /cart", guard: cart}`+"\n", "", 1),
		"  cart:\n    policies:\n      - {name: cart-window, kind: fixed-window, limit: 1, window: 1m}\n", "", 1))
	require.NoError(t, l.Reload())
	assert.Contains(t, l.Status().Changes, "guard cart: removed")
	assert.Equal(t, map[string]bool{"items": true}, u.names)
	require.NoError(t, l.Close())
	assert.Empty(t, u.names)
}

// max_keys changes in place: the clients' spent quotas stay spent.
func TestMaxKeysChangeKeepsEveryClientsQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rules = `
guards:
  api:
    key: {header: X-API-Key}
    policies:
      - {name: per-client, kind: fixed-window, limit: 2, window: 1h, per_key: true, max_keys: 100}
default: api
`
		l, path := newLoader(t, rules)
		h := serve(t, l)
		assert.Equal(t, []int{200, 200, 429}, statuses(h, "/x", 3, "X-API-Key", "alice"))
		assert.Equal(t, []int{200}, statuses(h, "/x", 1, "X-API-Key", "bob"))

		writeRules(t, path, strings.Replace(rules, "max_keys: 100", "max_keys: 200", 1))
		require.NoError(t, l.Reload())
		assert.Equal(t, []string{"policy per-client: max_keys 100 → 200 (in place)"}, l.Status().Changes)
		assert.Equal(t, []int{429}, statuses(h, "/x", 1, "X-API-Key", "alice"),
			"alice spent her 2 calls of the hour; a reload raising max_keys gave them back")

		writeRules(t, path, strings.Replace(rules, "max_keys: 100", "max_keys: 1", 1))
		require.NoError(t, l.Reload())
		assert.Equal(t, []int{429}, statuses(h, "/x", 1, "X-API-Key", "alice"), "alice, the key used last, is kept")
		assert.Equal(t, []int{200, 200, 429}, statuses(h, "/x", 3, "X-API-Key", "bob"), "bob was evicted: afresh")
	})
}

// A load that fails after it set a bucket's new numbers in place sets back
// the numbers in force before it, not the old file's: a rate set by hand
// since (from the dashboard) stays.
func TestAFailedLoadKeepsARateSetByHand(t *testing.T) {
	v1 := "guards:\n  api:\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 100/s, burst: 100}\n" +
		"  batch:\n    policies:\n      - {name: other, kind: token-bucket, rate: 100/s, burst: 100}\n" +
		"routes:\n  - {route: \"GET /a\", guard: api}\n"
	l, path := newLoader(t, v1, WithGuardOptions(func(guard string) []sluice.Option {
		if guard == "batch" { // a Guard that calls out, which no route may take
			return []sluice.Option{sluice.WithRetry(sluice.Retry{Attempts: 2, Backoff: time.Millisecond})}
		}
		return nil
	}))
	_, err := l.HTTP()
	require.NoError(t, err)
	g, _ := l.Guard("api")
	tb := g.Policies()[0].(*ratelimit.TokenBucket)
	require.NoError(t, tb.SetLimit(ratelimit.PerSecond(5), 100)) // by hand

	// The burst changes in place; the route to batch fails the load after.
	v2 := strings.Replace(v1, "burst: 100}\n  batch", "burst: 50}\n  batch", 1) + "  - {route: \"GET /b\", guard: batch}\n"
	writeRules(t, path, v2)
	require.Error(t, l.Reload())
	assert.Equal(t, ratelimit.PerSecond(5), tb.Rate(), "the failed load set the rate set by hand back to the old file's")
	assert.EqualValues(t, 100, tb.Burst())
}

// hookName is a policy whose Name runs fn: it stands in for an operator's
// click that arrives while a load runs, once the load set new numbers in
// place and before it fails.
type hookName struct {
	*ratelimit.TokenBucket
	fn func()
}

func (h hookName) Name() string {
	if h.fn != nil {
		h.fn()
	}
	return h.TokenBucket.Name()
}

// A rate set by hand (the dashboard's rate action) while a load runs, once
// the load set the bucket's new numbers in place, holds when the load then
// fails, as shadow modes set by hand then do: the operator was told it was
// set.
func TestARateSetByHandDuringAFailedLoadHolds(t *testing.T) {
	v1 := "guards:\n  api:\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 100/s, burst: 100}\n" +
		"  batch:\n    policies:\n      - {name: other, kind: token-bucket, rate: 100/s, burst: 100}\n" +
		"routes:\n  - {route: \"GET /a\", guard: api}\n"
	var tb *ratelimit.TokenBucket
	var fired atomic.Bool
	hookTB, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1000), 1000, ratelimit.WithName("hook"))
	require.NoError(t, err)
	hook := hookName{TokenBucket: hookTB, fn: func() {
		// Once the load has set burst 50 in place: the operator sets the
		// rate to 5/s by hand.
		if tb != nil && tb.Burst() == 50 && fired.CompareAndSwap(false, true) {
			require.NoError(t, tb.SetLimit(ratelimit.PerSecond(5), tb.Burst()))
		}
	}}
	strs, err := degrade.New(degrade.OnRejected(degrade.Value("busy")))
	require.NoError(t, err)
	l, path := newLoader(t, v1, WithGuardOptions(func(guard string) []sluice.Option {
		if guard == "batch" { // fallbacks no middleware can serve: no route may take it
			return []sluice.Option{sluice.With(hook), sluice.WithFallback(strs)}
		}
		return nil
	}))
	_, err = l.HTTP()
	require.NoError(t, err)
	g, _ := l.Guard("api")
	tb = g.Policies()[0].(*ratelimit.TokenBucket)

	// The burst changes in place; the route to batch fails the load after.
	v2 := strings.Replace(v1, "burst: 100}\n  batch", "burst: 50}\n  batch", 1) + "  - {route: \"GET /b\", guard: batch}\n"
	writeRules(t, path, v2)
	require.ErrorContains(t, l.Reload(), "answers no http.Handler")
	require.True(t, fired.Load(), "the hook never ran after the numbers were set")
	require.Equal(t, ratelimit.PerSecond(5), tb.Rate(), "the failed load undid the rate the operator set while it ran")
}
