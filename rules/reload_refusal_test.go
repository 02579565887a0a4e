package rules

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// "Each load checks the whole file first and reports every error with its
// line": a file saved in Latin-1 (an "é" in a fallback body on line 9) too,
// at the line of the byte that is not UTF-8. JSON files alike.
func TestInvalidUTF8IsReportedWithItsLine(t *testing.T) {
	yamlFile := "guards:\n" + // 1
		"  api:\n" + // 2
		"    policies:\n" + // 3
		"      - {name: p, kind: fixed-window, limit: 1, window: 1m}\n" + // 4
		"routes:\n" + // 5
		"  - {route: \"GET /items\", guard: api}\n" + // 6
		"fallbacks:\n" + // 7
		"  - cause: rate-limited\n" + // 8
		"    body: \"caf\xe9\"\n" + // 9: Latin-1 é
		"    status: 200\n"
	jsonFile := "{\"guards\": {\"api\": {\"policies\": [\n" + // 1
		"  {\"name\": \"caf\xe9\", \"kind\": \"gcra\", \"rate\": \"2/s\", \"burst\": 2}]}},\n" + // 2
		" \"default\": \"api\"}\n"
	for _, c := range []struct {
		name, content, want string
	}{
		{"rules.yaml", yamlFile, "rules.yaml:9:"},
		{"rules.json", jsonFile, "rules.json:2:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), c.name)
			require.NoError(t, os.WriteFile(path, []byte(c.content), 0o644))
			l, err := New(path, WithLogger(quietLog))
			if l != nil {
				l.Close()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want, "the error names the line of the byte that is not UTF-8")
		})
	}
}

// A bulkhead that gains a queue is made anew, and the new one counts the
// calls still running under the old one: a third call waits in its queue
// for one of the two in flight of limit 2 to end, and then runs at once,
// not beside them.
func TestARebuiltBulkheadCountsTheCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, path := newLoader(t, oneGuard("{name: p, kind: bulkhead, limit: 2}"))
		g, _ := l.Guard("api")
		release := make(chan struct{})
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = g.Do(context.Background(), func(context.Context) error { <-release; return nil })
			}()
		}
		synctest.Wait() // both in flight

		writeRules(t, path, oneGuard("{name: p, kind: bulkhead, limit: 2, queue: 5, max_wait: 1s}"))
		require.NoError(t, l.Reload())

		g2, _ := l.Guard("api")
		ranBeside := false
		var thirdErr error
		var inFlight sync.WaitGroup
		inFlight.Add(1)
		go func() {
			defer inFlight.Done()
			thirdErr = g2.Do(context.Background(), func(context.Context) error {
				select {
				case <-release:
				default:
					ranBeside = true // two calls of the limit-2 bulkhead still run
				}
				return nil
			})
		}()
		synctest.Wait()
		start := time.Now()
		close(release)
		wg.Wait()
		inFlight.Wait()
		assert.False(t, ranBeside, "a third call ran while the two of limit 2 were in flight")
		assert.NoError(t, thirdErr, "the queued call runs once a carried one ends")
		assert.Zero(t, time.Since(start), "the queued call waited out its max_wait")
	})
}

const retryingGuardRules = `
guards:
  items:
    policies:
      - {name: items-rate, kind: token-bucket, rate: 1/min, burst: 3}
  cart:
    policies:
      - {name: cart-window, kind: fixed-window, limit: 5, window: 1m}
routes:
  - {route: "GET /items", guard: items}
`

// A load the middleware refuses (a route moved onto a Guard the program
// gives retries with WithGuardOptions) fails and keeps the rules in force,
// and its error names the file's guard and the line of the route that put
// it behind the middleware.
func TestAMiddlewareRefusalNamesTheGuardAndItsLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, path := newLoader(t, retryingGuardRules, WithGuardOptions(func(g string) []sluice.Option {
			if g == "cart" {
				return []sluice.Option{sluice.WithRetry(sluice.Retry{})}
			}
			return nil
		}))
		h := serve(t, l)
		assert.Equal(t, []int{200, 200}, statuses(h, "/items", 2))

		writeRules(t, path, retryingGuardRules+"  - {route: \"GET /cart\", guard: cart}\n") // line 11
		err := l.Reload()
		require.Error(t, err)
		assert.Equal(t, uint64(1), l.Version().N, "the rules in force stay")
		assert.Equal(t, []int{200, 429}, statuses(h, "/items", 2), "the bucket keeps its tokens")
		assert.Contains(t, err.Error(), "retries")
		assert.Contains(t, err.Error(), `guard cart`, "the error names the file's guard")
		assert.Regexp(t, regexp.MustCompile(`rules\.yaml:\d+:\d+:`), err.Error(), "the error has its line")
		assert.True(t, strings.Contains(l.Status().Err.Error(), "retries"))
	})
}

// A guard rebuilt by a reload lets its old Guard's observers go, but a
// policy the program's options give every Guard (a Keyed whose janitor
// forgets idle keys) serves on in the successor: its janitor still runs.
// One the options made afresh for the old Guard is closed once the load
// stands.
func TestARebuiltGuardLeavesTheOptionsPoliciesOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) { return ratelimit.NewGCRA(ratelimit.PerSecond(10), 10) },
			ratelimit.WithName("shared"), ratelimit.WithIdleTTL(time.Second), ratelimit.WithJanitor(time.Second))
		require.NoError(t, err)
		defer shared.Close()
		var fresh []*ratelimit.Keyed
		l, path := newLoader(t, oneGuard("{name: p, kind: fixed-window, limit: 100, window: 1m}"), WithGuardOptions(func(string) []sluice.Option {
			own, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) { return ratelimit.NewGCRA(ratelimit.PerSecond(10), 10) },
				ratelimit.WithName("own"), ratelimit.WithJanitor(time.Second), ratelimit.WithIdleTTL(time.Second))
			require.NoError(t, err)
			fresh = append(fresh, own)
			return []sluice.Option{sluice.With(shared, own)}
		}))
		writeRules(t, path, "guards:\n  api:\n    key: {header: X-Key}\n    timeout: 1s\n    policies:\n      - {name: p, kind: fixed-window, limit: 100, window: 1m}\ndefault: api\n")
		require.NoError(t, l.Reload()) // the timeout rebuilds the guard
		require.Len(t, fresh, 2)
		g, _ := l.Guard("api")
		require.NoError(t, g.Do(sluice.WithKey(context.Background(), "k"), func(context.Context) error { return nil }))
		require.Equal(t, 1, shared.Len())
		time.Sleep(3 * time.Second)
		synctest.Wait()
		assert.Zero(t, shared.Len(), "the shared Keyed's janitor stopped with the old Guard")
		require.NoError(t, fresh[1].Close())
		// The old Guard's own Keyed was closed by the load: its janitor's
		// goroutine has ended (synctest would report it left running).
	})
}
