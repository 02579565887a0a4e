package rules

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Reloads of every sort while 16 goroutines drive traffic: new numbers, a
// new kind, a route moved, shadow flipped, a broken file. Every request is
// answered by one set of rules or another, and nothing races (-race).
func TestReloadsUnderTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		files := []string{
			twoLimits,
			strings.Replace(twoLimits, "rate: 1/min, burst: 3", "rate: 1000/s, burst: 50", 1),
			strings.Replace(twoLimits, "kind: fixed-window, limit: 1", "kind: sliding-log, limit: 5", 1),
			strings.Replace(twoLimits, `{route: "GET /items", guard: items}`, `{route: "GET /items", guard: cart}`, 1),
			strings.Replace(twoLimits, "burst: 3}", "burst: 3, shadow: true}", 1),
			"guards: [",
		}
		l, path := newLoader(t, twoLimits)
		h := serve(t, l)
		var wg sync.WaitGroup
		seen := make([]map[int]int, 16)
		for i := range seen {
			seen[i] = map[int]int{}
			wg.Go(func() {
				for j := range 300 {
					target := "/items"
					if j%2 == 1 {
						target = "/cart"
					}
					seen[i][get(h, target, "X-Key", "k").Code]++
				}
			})
		}
		failed := 0
		for i := range 60 {
			writeRules(t, path, files[i%len(files)])
			if l.Reload() != nil {
				failed++
			}
		}
		wg.Wait()
		assert.Equal(t, 10, failed, "the broken file, each time")
		assert.Equal(t, uint64(failed), l.Status().Failures)
		total := 0
		for _, m := range seen {
			for code, n := range m {
				assert.Contains(t, []int{200, 429}, code)
				total += n
			}
		}
		assert.Equal(t, 16*300, total)
		writeRules(t, path, twoLimits)
		require.NoError(t, l.Reload())
	})
}
