package rules

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/internal/redistest"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
)

func TestEchoFollowsTheRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, path := newLoader(t, strings.Replace(twoLimits, `"GET /items"`, `"/items"`, 1))
		mw, err := l.Echo()
		require.NoError(t, err)
		e := echo.New()
		e.Use(mw)
		e.GET("/items", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
		assert.Equal(t, []int{200, 200, 200, 429}, statuses(e, "/items", 4))

		writeRules(t, path, strings.Replace(twoLimits, `{route: "GET /items", guard: items}`, `{route: "/items", guard: cart}`, 1))
		require.NoError(t, l.Reload())
		assert.Equal(t, []int{200, 429}, statuses(e, "/items", 2), "the cart's window, not yet spent, now guards /items")
	})
}

func TestHTTPRefusesARouteTableOfItsOwn(t *testing.T) {
	l, _ := newLoader(t, twoLimits)
	_, err := l.HTTP(sluicehttp.WithGuard(nil))
	assert.Error(t, err)
	mw, err := l.HTTP(sluicehttp.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, d sluice.Decision) {
		http.Error(w, "denied by "+d.Policy, http.StatusTooManyRequests)
	}))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /cart", func(http.ResponseWriter, *http.Request) {})
	h := mw(mux)
	w := httptest.NewRecorder()
	for range 2 {
		w = httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/cart", nil))
	}
	assert.Equal(t, "denied by cart-window\n", w.Body.String(), "the program's options apply")
}

func TestRedisLimitByName(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer client.Close()
	const rules = `
guards:
  api:
    key: {header: X-Tenant}
    policies:
      - {name: fleet, kind: fixed-window, limit: 2, window: 1m, store: redis, fail: closed}
default: api
`
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, rules)
	// Two instances load the same file: they share the limit named fleet.
	var hs []http.Handler
	for range 2 {
		l, err := New(path, WithLogger(quietLog), WithRedis(client))
		require.NoError(t, err)
		defer l.Close()
		hs = append(hs, serve(t, l))
	}
	assert.Equal(t, []int{200}, statuses(hs[0], "/x", 1, "X-Tenant", "acme"))
	assert.Equal(t, []int{200, 429}, statuses(hs[1], "/x", 2, "X-Tenant", "acme"))
	assert.Equal(t, []int{200}, statuses(hs[1], "/x", 1, "X-Tenant", "other"))
	keys, err := client.Keys(context.Background(), "*fleet*").Result()
	require.NoError(t, err)
	assert.NotEmpty(t, keys, "the limit's keys carry its name")
}

// A load whose new rules the middleware refuses (a guard whose program-given
// options carry a fallback answering no http.Handler) fails, as any bad
// load does: the rules in force stay whole, numbers included, where the
// middleware used to serve its previous route table with the numbers
// changed in place, half the new rules.
func TestALoadTheMiddlewareRefusesFails(t *testing.T) {
	const v1 = "guards:\n  api:\n    policies:\n      - {name: off, kind: shed}\nroutes:\n  - {route: \"GET /items\", guard: api}\n"
	v2 := strings.Replace(v1, "{name: off, kind: shed}",
		"{name: off, kind: shed, on: true}\n  jobs:\n    policies:\n      - {name: jobs-off, kind: shed}", 1) +
		"  - {route: \"GET /cart\", guard: jobs}\n"
	fb, err := degrade.New(degrade.OnRejected(degrade.Value("busy")))
	require.NoError(t, err)
	l, path := newLoader(t, v1, WithGuardOptions(func(name string) []sluice.Option {
		if name == "jobs" { // used with sluice.Execute[string] elsewhere
			return []sluice.Option{sluice.WithFallback(fb)}
		}
		return nil
	}))
	h := serve(t, l)
	require.Equal(t, http.StatusOK, get(h, "/items").Code)
	writeRules(t, path, v2)
	err = l.Reload()
	require.ErrorContains(t, err, "middleware refuses")
	assert.Equal(t, uint64(1), l.Status().Version.N, "the rules in force stay")
	assert.Equal(t, http.StatusOK, get(h, "/items").Code, "the shed's number set back")
}
