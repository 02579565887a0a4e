package adaptive_test

import (
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
