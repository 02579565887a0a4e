package rules

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/ratelimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quietLog drops the Loader's log lines.
var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// writeRules writes content to the rules file at path.
func writeRules(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

// newLoader writes content to a rules file of a fresh directory and loads
// it.
func newLoader(t *testing.T, content string, opts ...Option) (*Loader, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, content)
	l, err := New(path, append([]Option{WithLogger(quietLog)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l, path
}

// serve wraps a mux answering 200 on every route with l's middleware.
func serve(t *testing.T, l *Loader) http.Handler {
	t.Helper()
	mw, err := l.HTTP()
	require.NoError(t, err)
	mux := http.NewServeMux()
	for _, p := range []string{"GET /items", "GET /cart", "GET /healthz", "/"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	}
	return mw(mux)
}

// get returns the status of a GET of target, with header fields given as
// name, value pairs.
func get(h http.Handler, target string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// statuses returns the statuses of n GETs of target.
func statuses(h http.Handler, target string, n int, header ...string) []int {
	var out []int
	for range n {
		out = append(out, get(h, target, header...).Code)
	}
	return out
}

const twoLimits = `
guards:
  items:
    policies:
      - {name: items-rate, kind: token-bucket, rate: 1/min, burst: 3}
  cart:
    policies:
      - {name: cart-window, kind: fixed-window, limit: 1, window: 1m}
routes:
  - {route: "GET /items", guard: items}
  - {route: "GET /cart", guard: cart}
  - {route: "GET /healthz", guard: none}
`

func TestServesTheFilesRoutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLoader(t, twoLimits)
		h := serve(t, l)
		assert.Equal(t, []int{200, 200, 200, 429}, statuses(h, "/items", 4))
		assert.Equal(t, []int{200, 429}, statuses(h, "/cart", 2))
		assert.Equal(t, []int{200, 200, 200, 200, 200}, statuses(h, "/healthz", 5))
		assert.Equal(t, []int{200, 200}, statuses(h, "/other", 2), "no default: unlisted routes pass")
		assert.Equal(t, uint64(1), l.Version().N)
		assert.Len(t, l.Version().Hash, 64)
		g, ok := l.Guard("items")
		require.True(t, ok)
		require.Len(t, g.Policies(), 1)
		assert.Equal(t, "items-rate", g.Policies()[0].Name())
	})
}

func TestJSONFileLoadsAsYAMLWould(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.json")
	writeRules(t, path, `{"guards": {"api": {"policies": [{"name": "api", "kind": "gcra", "rate": "2/s", "burst": 2}]}},
	 "default": "api"}`)
	l, err := New(path, WithLogger(quietLog))
	require.NoError(t, err)
	defer l.Close()
	assert.Equal(t, []int{200, 200, 429}, statuses(serve(t, l), "/anything", 3))

	writeRules(t, path, `{"guards": {"api": {"policies": [}}`)
	err = l.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rules.json")
}

func TestNumbersOnlyReloadKeepsTheBucketsTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, path := newLoader(t, twoLimits)
		h := serve(t, l)
		assert.Equal(t, []int{200, 200}, statuses(h, "/items", 2))
		assert.Equal(t, []int{200}, statuses(h, "/cart", 1))
		g, _ := l.Guard("items")
		tb := g.Policies()[0].(*ratelimit.TokenBucket)

		// Another rate: the bucket keeps its one token.
		writeRules(t, path, strings.Replace(twoLimits, "rate: 1/min, burst: 3", "rate: 2/min, burst: 3", 1))
		require.NoError(t, l.Reload())
		assert.Equal(t, uint64(2), l.Version().N)
		g2, _ := l.Guard("items")
		assert.Same(t, tb, g2.Policies()[0], "the policy is updated in place")
		assert.Same(t, g, g2, "a guard whose policies are the same is kept")
		assert.Equal(t, ratelimit.Rate{Count: 2, Period: time.Minute}, tb.Rate())
		assert.InDelta(t, 1, tb.Tokens(), 1e-9)
		assert.Equal(t, []int{200, 429}, statuses(h, "/items", 2))
		assert.Equal(t, []string{"policy items-rate: rate 1/1m0s → 2/1m0s (in place)"}, l.Status().Changes)

		// The cart's window, unchanged, kept its count: still exhausted.
		assert.Equal(t, []int{429}, statuses(h, "/cart", 1))
	})
}

const breakerRules = `
guards:
  pay:
    policies:
      - {name: pay-breaker, kind: breaker, consecutive_failures: 1, open_for: 1m}
      - {name: pay-rate, kind: token-bucket, rate: 100/s, burst: 100}
default: pay
`

func TestKindChangeRebuildsThePolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, path := newLoader(t, twoLimits)
		h := serve(t, l)
		assert.Equal(t, []int{200, 429}, statuses(h, "/cart", 2))
		writeRules(t, path, strings.Replace(twoLimits, "kind: fixed-window, limit: 1", "kind: sliding-log, limit: 2", 1))
		require.NoError(t, l.Reload())
		assert.Equal(t, []int{200, 200, 429}, statuses(h, "/cart", 3), "a new policy starts afresh")
		assert.Contains(t, l.Status().Changes, "policy cart-window: rebuilt: kind fixed-window → sliding-log")
	})
}

func TestRouteMovesToAnotherGuardWithoutRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, path := newLoader(t, twoLimits)
		h := serve(t, l)
		assert.Equal(t, []int{200, 200, 200, 429}, statuses(h, "/items", 4))
		writeRules(t, path, strings.Replace(twoLimits, `{route: "GET /items", guard: items}`, `{route: "GET /items", guard: none}`, 1))
		require.NoError(t, l.Reload())
		assert.Equal(t, []int{200, 200, 200}, statuses(h, "/items", 3))
		assert.Contains(t, l.Status().Changes, "route GET /items: guard items → none")
	})
}

func TestInvalidFileKeepsTheRulesInForce(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{"yaml syntax", "guards:\n  items: [\n", "rules.yaml: yaml: line"},
		{"negative rate", strings.Replace(twoLimits, "rate: 1/min", "rate: -5/s", 1), "rules.yaml:5:54: rate: the count -5 is not positive"},
		{"unknown kind", strings.Replace(twoLimits, "kind: fixed-window", "kind: fixed-windo", 1), `rules.yaml:8:9: policy "cart-window": unknown kind "fixed-windo"`},
		{"duplicate route", strings.Replace(twoLimits, `guard: none}`, "guard: none}\n  - {route: \"GET /cart\", guard: items}", 1),
			`rules.yaml:13:5: route "GET /cart" is given twice (first on line 11)`},
		{"constructor refuses", strings.Replace(twoLimits, "window: 1m", "window: 1ns", 1), "rules.yaml:8:9: policy cart-window: ratelimit: fixed window: 1ns is too short"},
		{"empty", "", "empty file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var heard []Status
				l, path := newLoader(t, twoLimits, OnReload(func(s Status) { heard = append(heard, s) }))
				h := serve(t, l)
				before := l.Version()
				writeRules(t, path, tc.content)
				err := l.Reload()
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.want)
				assert.Equal(t, before, l.Version())
				st := l.Status()
				assert.Equal(t, err, st.Err)
				assert.Equal(t, uint64(1), st.Failures)
				require.Len(t, heard, 1)
				assert.Equal(t, err, heard[0].Err)
				assert.Equal(t, []int{200, 200, 200, 429}, statuses(h, "/items", 4), "the old limit still holds")
			})
		})
	}
}

func TestEveryErrorIsReportedWithItsLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, `
guards:
  a:
    policies:
      - {name: x, kind: token-bucket, rate: 0/s, burst: 1}
      - {name: x, kind: breaker, burst: 3}
      - {kind: gcra}
    colour: blue
routes:
  - {route: "GET /a", guard: b}
fallbacks:
  - {route: "GET /z", cause: boredom, status: 200}
  - {cause: timeout, status: 103}
`)
	_, err := New(path, WithLogger(quietLog))
	require.Error(t, err)
	for _, want := range []string{
		`rules.yaml:5:45: rate: the count 0 is not positive`,
		`rules.yaml:6:41: policy "x": a breaker takes no burst`,
		`rules.yaml:7:9: a policy needs a name`,
		`rules.yaml:8:13: guard "a": unknown field "colour"`,
		`rules.yaml:12:30: cause: "boredom" is not one of`,
		`rules.yaml:13:30: status: 103 is not the status of a final answer (200 to 599)`,
	} {
		assert.Contains(t, err.Error(), want)
	}
	// The names that refer to each other are checked once the fields are
	// sound.
	writeRules(t, path, `
guards:
  a:
    policies:
      - {name: x, kind: token-bucket, rate: 1/s, burst: 1}
      - {name: x, kind: breaker}
      - {name: y, kind: gcra, rate: 1/s, burst: 1, per_key: true}
      - {name: db, kind: breaker}
      - {name: breaker/db, kind: token-bucket, rate: 1/s, burst: 1, shadow: true}
routes:
  - {route: "GET /a", guard: b}
fallbacks:
  - {route: "GET /z", cause: timeout, status: 200}
`)
	_, err = New(path, WithLogger(quietLog))
	require.Error(t, err)
	for _, want := range []string{
		`rules.yaml:6:9: policy name "x" is used twice (first on line 5)`,
		`rules.yaml:7:9: policy "y" is per_key but guard "a" has no key`,
		`rules.yaml:9:9: policy "breaker/db" goes by "breaker/db" in guard "a", as policy "db" (line 8) does: rename one`,
		`rules.yaml:11:5: no guard named "b"`,
		`rules.yaml:13:5: fallback for route "GET /z", which no route lists`,
	} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestRemovedFileKeepsTheRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, path := newLoader(t, twoLimits)
		h := serve(t, l)
		require.NoError(t, os.Remove(path))
		err := l.Reload()
		require.ErrorIs(t, err, os.ErrNotExist)
		assert.Contains(t, err.Error(), "the rules of version 1 stay in force")
		assert.Equal(t, []int{200, 200, 200, 429}, statuses(h, "/items", 4))
		writeRules(t, path, twoLimits)
		require.NoError(t, l.Reload(), "the same content again")
		assert.Equal(t, uint64(1), l.Version().N)
		assert.NoError(t, l.Status().Err)
	})
}

func TestFallbacksByRouteAndCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rules := twoLimits + `
fallbacks:
  - route: "GET /items"
    cause: rate-limited
    status: 200
    headers: {Content-Type: application/json, X-Fallback: "items"}
    body: '[]'
  - cause: rejected
    status: 503
    body: busy
`
		l, path := newLoader(t, rules)
		h := serve(t, l)
		statuses(h, "/items", 3)
		w := get(h, "/items")
		assert.Equal(t, 200, w.Code)
		assert.Equal(t, "[]", w.Body.String())
		assert.Equal(t, "items", w.Header().Get("X-Fallback"))
		assert.Equal(t, "application/json", w.Header().Get("Content-Type"))

		statuses(h, "/cart", 1)
		w = get(h, "/cart")
		assert.Equal(t, 503, w.Code)
		assert.Equal(t, "busy", w.Body.String())

		// Lines moved, nothing changed: the Guards stay.
		g, _ := l.Guard("items")
		writeRules(t, path, "# the shop's rules\n"+rules)
		require.NoError(t, l.Reload())
		assert.Empty(t, l.Status().Changes)
		g2, _ := l.Guard("items")
		assert.Same(t, g, g2)
	})
}

func TestPerClientKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLoader(t, `
guards:
  api:
    key: {header: X-API-Key, missing: reject}
    policies:
      - {name: per-client, kind: fixed-window, limit: 2, window: 1m, per_key: true, max_keys: 100}
  open:
    key: {ip: {}}
    policies:
      - {name: per-ip, kind: fixed-window, limit: 1, window: 1m, per_key: true}
routes:
  - {route: "GET /items", guard: api}
default: open
`)
		h := serve(t, l)
		assert.Equal(t, []int{200, 200, 429}, statuses(h, "/items", 3, "X-API-Key", "alice"))
		assert.Equal(t, []int{200, 200, 429}, statuses(h, "/items", 3, "X-API-Key", "bob"))
		assert.Equal(t, []int{400}, statuses(h, "/items", 1), "no key: rejected")
		assert.Equal(t, []int{200, 429}, statuses(h, "/other", 2), "keyed by the client address")
	})
}

func TestShedFlipsWithTheFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rules = `
guards:
  api:
    policies:
      - {name: maintenance, kind: shed, on: false, retry_after: 30s}
default: api
`
		l, path := newLoader(t, rules)
		h := serve(t, l)
		assert.Equal(t, 200, get(h, "/x").Code)
		writeRules(t, path, strings.Replace(rules, "on: false", "on: true", 1))
		require.NoError(t, l.Reload())
		w := get(h, "/x")
		assert.Equal(t, 503, w.Code)
		assert.Equal(t, "30", w.Header().Get("Retry-After"))
		assert.Contains(t, l.Status().Changes, "policy maintenance: on false → true (in place)")
	})
}

func TestOptionsAndCallsValidate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, twoLimits)
	for _, o := range []Option{WithRedis(nil), WithLogger(nil), OnReload(nil)} {
		_, err := New(path, o)
		assert.Error(t, err)
	}
	_, err := New(filepath.Join(t.TempDir(), "none.yaml"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	l, err := New(path, WithLogger(quietLog))
	require.NoError(t, err)
	_, err = l.HTTP(nil)
	assert.Error(t, err, "a nil option")
	require.NoError(t, l.Close())
	require.NoError(t, l.Close())
	assert.Error(t, l.Reload())
	assert.Error(t, l.Watch())
}

func TestRedisLimitNeedsAClient(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, `
guards:
  api:
    policies:
      - {name: fleet, kind: gcra, rate: 10/s, burst: 10, store: redis}
default: api
`)
	_, err := New(path, WithLogger(quietLog))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rules.yaml:5:9: policy fleet: store: redis, but the program gave no Redis client")
}

// shadowFile is a file of three guards: a, whose bucket holds burst; c, of
// the kind cKind; and b, a chain of 65 policies whose last is shadowed when
// shadowLast.
func shadowFile(burst int, cKind string, shadowLast bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "guards:\n  a:\n    policies:\n      - {name: a-rate, kind: token-bucket, rate: 1/min, burst: %d}\n", burst)
	fmt.Fprintf(&b, "  c:\n    policies:\n      - {name: c-limit, kind: %s, limit: 5, window: 1m}\n", cKind)
	b.WriteString("  b:\n    policies:\n")
	for i := range 65 {
		shadow := ""
		if i == 64 && shadowLast {
			shadow = ", shadow: true"
		}
		fmt.Fprintf(&b, "      - {name: b%d, kind: token-bucket, rate: 1000/s, burst: 1000%s}\n", i, shadow)
	}
	b.WriteString("default: a\n")
	return b.String()
}

// A Guard shadows only the first 64 policies of its chain: a file that
// shadows a later one is refused as it is read, before the rules in force
// change (new numbers, a guard rebuilt), and a sound file loads after it.
func TestShadowPast64IsRefusedBeforeAnythingChanges(t *testing.T) {
	l, path := newLoader(t, shadowFile(3, "fixed-window", false))
	writeRules(t, path, shadowFile(1, "sliding-log", true))
	err := l.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `guard "b": policy "b64" is policy 65 of the chain; only the first 64 can be shadowed`)
	assert.Equal(t, uint64(1), l.Version().N)
	ga, ok := l.Guard("a")
	require.True(t, ok)
	admitted := 0
	for range 4 {
		if ga.Do(t.Context(), func(context.Context) error { return nil }) == nil {
			admitted++
		}
	}
	assert.Equal(t, 3, admitted, "a's bucket keeps its burst of 3")
	writeRules(t, path, shadowFile(3, "sliding-log", false))
	require.NoError(t, l.Reload())
	assert.Equal(t, uint64(2), l.Version().N)
}

// A guard in shadow mode as a whole is refused past 64 policies, as the
// Guard's SetShadow("") refuses it: the 65th would enforce.
func TestGuardShadowOverALongChainIsRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("guards:\n  b:\n    shadow: true\n    policies:\n")
	for i := range 65 {
		fmt.Fprintf(&b, "      - {name: b%d, kind: token-bucket, rate: 1000/s, burst: 1000}\n", i)
	}
	b.WriteString("default: b\n")
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, b.String())
	_, err := New(path, WithLogger(quietLog))
	assert.ErrorContains(t, err, "only the first 64 can be shadowed")
}

// The name the parser reckons each kind goes by in its Guard, which tells
// two of them apart, is the name the policy built reports.
func TestNameInGuardIsThePoliciesName(t *testing.T) {
	l, _ := newLoader(t, `
guards:
  a:
    policies:
      - {name: tb, kind: token-bucket, rate: 1/s, burst: 1}
      - {name: gc, kind: gcra, rate: 1/s, burst: 1}
      - {name: lb, kind: leaky-bucket, rate: 1/s, capacity: 1}
      - {name: fw, kind: fixed-window, limit: 1, window: 1s}
      - {name: sw, kind: sliding-window, limit: 1, window: 1s}
      - {name: sl, kind: sliding-log, limit: 1, window: 1s}
      - {name: wu, kind: warm-up, rate: 1/s, burst: 2, warm_up: 1s, cold_factor: 3}
      - {name: sh, kind: shaper, rate: 1/s, max_wait: 1s}
      - {name: br, kind: breaker}
      - {name: th, kind: throttle}
      - {name: sd, kind: shedder}
      - {name: bh, kind: bulkhead, limit: 2}
      - {name: off, kind: shed}
  b:
    key: {header: X-Key}
    policies:
      - {name: pk, kind: token-bucket, rate: 1/s, burst: 1, per_key: true}
default: a
`)
	st := l.cur.Load()
	seen := map[string]bool{}
	for _, gs := range st.spec.guards {
		for _, ps := range gs.policies {
			seen[ps.kind] = true
			assert.Equal(t, st.policies[ps.name].p.Name(), nameInGuard(ps), "%s %q", ps.kind, ps.name)
		}
	}
	assert.Len(t, seen, len(kinds), "every kind: %v", seen)
}

// A JSON file's syntax error names its line and column, as every error of
// a rules file does.
func TestJSONSyntaxErrorNamesItsLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.json")
	writeRules(t, path, "{\n  \"guards\": {\n    \"api\": {\"policies\": [}\n  }\n}\n")
	_, err := New(path, WithLogger(quietLog))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rules.json:3")
}

// proxy_headers without trusted_proxies would never be read (no proxy is
// trusted): every client behind the load balancer would share its bucket.
// The file is refused.
func TestProxyHeadersWithoutTrustedProxiesIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, `
guards:
  api:
    key: {ip: {proxy_headers: [X-Real-IP]}}
    policies:
      - {name: p, kind: token-bucket, rate: 1/s, burst: 1, per_key: true}
default: api
`)
	l, err := New(path, WithLogger(quietLog))
	if err == nil {
		l.Close()
	}
	assert.Error(t, err)
}

// Header names are case-insensitive: Content-Type and content-type are one
// field given twice, refused rather than the second silently winning.
func TestFallbackHeaderGivenTwiceIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, `
guards:
  api:
    policies:
      - {name: p, kind: token-bucket, rate: 1/s, burst: 1}
default: api
fallbacks:
  - {cause: rate-limited, status: 200, headers: {Content-Type: text/plain, content-type: application/json}, body: "[]"}
`)
	l, err := New(path, WithLogger(quietLog))
	if err == nil {
		l.Close()
	}
	assert.Error(t, err)
}

// A fallback for a route mapped to none could never answer (the route has
// no Guard): refused, as a fallback for a route no route lists is.
func TestFallbackForAnUnguardedRouteIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, twoLimits+`fallbacks:
  - {route: "GET /healthz", cause: error, status: 200, body: "ok"}
`)
	l, err := New(path, WithLogger(quietLog))
	if err == nil {
		l.Close()
	}
	assert.Error(t, err)
}
