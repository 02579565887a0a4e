package adaptive_test

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// slowingPool is poolModel whose hold grows by factor once after has
// passed since its first request: a dependency turned slower for good.
type slowingPool struct {
	poolModel
	after  time.Duration
	factor float64
	mu     sync.Mutex
	start  time.Time
}

func (m *slowingPool) work() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.start.IsZero() {
		m.start = time.Now()
	}
	if time.Since(m.start) >= m.after {
		return m.hold * m.factor
	}
	return m.hold
}

// A dependency that turns twice as slow for good, in a surge, reads at
// first as a queue that no limit cuts, and the limit sinks. The Shedder
// probes again once its limit has halved, finds the new baseline, and
// resumes from the limit it had: over the two seconds after the change
// the pool serves most of what it now can. (Waiting for the next probe
// due, it served a quarter, at its floor of 3, for up to 5 s.)
func TestShedderFollowsADependencyTurnedSlower(t *testing.T) {
	for seed := range uint64(3) {
		m := &slowingPool{poolModel: poolBound, after: 8 * time.Second, factor: 2}
		// Twice the pool's capacity, then four times its new one.
		phases := []phase{{400, 2 * time.Second}, {1600, 6 * time.Second}, {1600, 2 * time.Second}}
		rs, st := simulate(t, newShedder(t), m, seed, phases...)
		after := rs[2]
		goodput := float64(after.good) / phases[2].dur.Seconds() / 400
		t.Logf("seed %d: goodput %.1f%% of the new capacity, p99 %v, limit %d, baseline %v",
			seed, goodput*100, after.p99, st[2].Limit, st[2].Baseline)
		assert.GreaterOrEqual(t, goodput, 0.8, "seed %d", seed)
		assert.Greater(t, st[2].Baseline, 35*time.Millisecond, "seed %d: the new baseline", seed)
	}
}

// A dependency that turns 2.5 times slower at a steady 200 requests a
// second: 4 requests in flight become 10, well within the limit, and
// nothing queues. The rise in latency, with the limit not binding, is
// probed rather than cut: the probe finds the new baseline, and not a
// request is shed. (Cut at once, the limit sank to its floor of 3 and
// shed 60 % of the requests of the second after the change.)
func TestShedderShedsNothingWhenADependencyTurnsSlower(t *testing.T) {
	for seed := range uint64(3) {
		m := &slowingPool{poolModel: poolModel{size: 1 << 20, hold: 20}, after: 3 * time.Second, factor: 2.5}
		phases := []phase{{200, 3 * time.Second}, {200, 3 * time.Second}}
		rs, st := simulate(t, newShedder(t), m, seed, phases...)
		t.Logf("seed %d: rejected %d of %d, baseline %v, limit %d", seed, rs[1].rejected, rs[1].arrived, st[1].Baseline, st[1].Limit)
		assert.Zero(t, rs[1].rejected, "seed %d", seed)
		assert.InDelta(t, 50*ms, st[1].Baseline, float64(5*ms), "seed %d: the new baseline", seed)
	}
}

// partlySlow is a dependency that answers a tenth of its calls in 200 ms
// and the others in 20 ms, with no queue whatever the concurrency.
type partlySlow struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func (m *partlySlow) share(_, _ int) float64 { return 1 }
func (m *partlySlow) work() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rng.Float64() < 0.1 {
		return 200
	}
	return 20
}

// A service whose dependency answers a tenth of its calls ten times slower
// than the others, at a steady 200 requests a second, 8 in flight on
// average: no queue anywhere. A window's average latency then scatters by
// a third either way, and the first ends of a probe are its quick calls.
// The limit moves only for a rise beyond a window's noise, and a probe
// measures the requests it admitted to their ends: nothing is shed. (With
// windows taken at their average and probes at their first ends, the limit
// sank to its floor and 55-65 % of the requests were shed.)
func TestShedderShedsNothingForAFewSlowCalls(t *testing.T) {
	for seed := range uint64(3) {
		m := &partlySlow{rng: rand.New(rand.NewPCG(seed, 9))}
		phases := []phase{{200, 6 * time.Second}}
		rs, st := simulate(t, newShedder(t), m, seed, phases...)
		t.Logf("seed %d: rejected %d of %d, p99 %v, limit %d, baseline %v", seed, rs[0].rejected, rs[0].arrived, rs[0].p99, st[0].Limit, st[0].Baseline)
		assert.Zero(t, rs[0].rejected, "seed %d", seed)
	}
}
