// Package retrytest holds the checks that the tests of every retrying
// entry point share: the jitter of the delays between attempts, and the
// retry budget under a storm of failing calls.
package retrytest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Spread checks the delays before each retry: gaps[i] are the delays seen
// before retry i+1, each at most bounds[i], and spread over the bound (full
// jitter), not bunched at one end.
func Spread(t testing.TB, gaps [][]time.Duration, bounds []time.Duration) {
	t.Helper()
	for i, bound := range bounds {
		if len(gaps[i]) == 0 {
			t.Errorf("retry %d: no delay seen", i+1)
			continue
		}
		lo, hi := gaps[i][0], gaps[i][0]
		for _, d := range gaps[i] {
			if d > bound {
				t.Errorf("retry %d waited %v, past its bound %v", i+1, d, bound)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo >= bound/5 || hi <= bound*4/5 {
			t.Errorf("retry %d: delays from %v to %v do not spread over [0, %v]", i+1, lo, hi, bound)
		}
	}
}

// Storm runs call from 64 goroutines, each calling each times, and checks
// that the retries the dependency saw (attempts() less the calls) are at
// most ratio of the calls, plus floor a second for the time the storm took,
// plus the 10 retries a budget may save; and that the budget gave at least
// half its share. Run it in a testing/synctest bubble.
func Storm(t testing.TB, each int, ratio, floor float64, call func(), attempts func() int) {
	t.Helper()
	var requests atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range each {
				requests.Add(1)
				call()
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	n := float64(requests.Load())
	retries := float64(attempts()) - n
	bound := ratio*n + floor*secs + 10
	t.Logf("%.0f calls, %.0f retries in %.2fs; bound %.0f", n, retries, secs, bound)
	if retries > bound {
		t.Errorf("%.0f retries for %.0f calls in %.2fs: past the budget's %.0f", retries, n, secs, bound)
	}
	if retries < ratio*n/2 {
		t.Errorf("%.0f retries for %.0f calls: the budget gave far less than its share", retries, n)
	}
}
