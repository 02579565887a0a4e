package adaptive_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/policytest"
)

// callPhase is a stretch of open-loop Poisson arrivals at rate per second
// to a handler that calls a downstream with no bottleneck of its own
// (every call runs at once): it answers in hold with Success, except a
// share fail of the calls, which end Failure (a 500) after failHold.
type callPhase struct {
	rate     float64
	dur      time.Duration
	hold     time.Duration
	fail     float64
	failHold time.Duration
}

// simulateCalls is simulate (shed_sim_test.go) for a handler that waits on
// a downstream whose latency and outcome change by phase. It returns how
// many requests each phase's arrivals had rejected, and the Stats at the
// end of each phase.
func simulateCalls(t *testing.T, s *adaptive.Shedder, seed uint64, phases ...callPhase) ([]phaseResult, []adaptive.Stats) {
	t.Helper()
	var results []phaseResult
	var stats []adaptive.Stats
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		var mu sync.Mutex
		results = make([]phaseResult, len(phases))
		var wg sync.WaitGroup
		rng := rand.New(rand.NewPCG(seed, 1))
		ctx := context.Background()
		for p, ph := range phases {
			end := now() + ph.dur
			next := now() + time.Duration(rng.ExpFloat64()/ph.rate*float64(time.Second))
			for now() < end {
				for next < now()+time.Millisecond {
					at := now()
					hold, outcome := ph.hold, sluice.Success
					if rng.Float64() < ph.fail {
						hold, outcome = ph.failHold, sluice.Failure
					}
					wg.Go(func() {
						v := policytest.AnswerOf(s.Admit(ctx, at))
						mu.Lock()
						results[p].arrived++
						if v.Cause != nil {
							results[p].rejected++
						} else {
							results[p].admitted++
						}
						mu.Unlock()
						if v.Cause != nil {
							return
						}
						start := now()
						time.Sleep(hold)
						e := now()
						s.Done(v.Ticket, outcome, e, e-start)
					})
					next += time.Duration(rng.ExpFloat64() / ph.rate * float64(time.Second))
				}
				time.Sleep(time.Millisecond)
			}
			stats = append(stats, s.Stats())
		}
		wg.Wait()
	})
	return results, stats
}

const healthyCall, failingCall = 20 * ms, 50 * ms

// 200 requests a second to a handler behind NewShedder() calling a
// downstream that answers in 20 ms (4 requests in flight on average:
// nothing is shed), then answers 500 after 50 ms for a second, then heals.
// A failure quicker than 4 baselines is the dependency's answer, not a
// queue of this service's: nothing is shed during the failure (the breaker
// answers it), and the healed load is carried as before.
func TestADependencyFailingIsNotThisServicesLoad(t *testing.T) {
	for seed := range uint64(3) {
		rs, st := simulateCalls(t, newShedder(t), seed,
			callPhase{rate: 200, dur: 3 * time.Second, hold: healthyCall},
			callPhase{rate: 200, dur: time.Second, fail: 1, failHold: failingCall},
			callPhase{rate: 200, dur: time.Second, hold: healthyCall},
		)
		t.Logf("seed %d: healthy %d/%d shed, failing %d/%d, healed %d/%d (limit %d at the heal)",
			seed, rs[0].rejected, rs[0].arrived, rs[1].rejected, rs[1].arrived, rs[2].rejected, rs[2].arrived, st[1].Limit)
		assert.Zero(t, rs[0].rejected, "seed %d: the healthy load before the failure", seed)
		assert.Zero(t, rs[1].rejected, "seed %d: the failing spell", seed)
		assert.Zero(t, rs[2].rejected, "seed %d: the same healthy load in the second after the heal", seed)
	}
}

// Half the calls fail (a 500 after 50 ms), half succeed in 20 ms: the
// service is not overloaded (7 requests in flight on average, all of them
// waiting on the downstream), and the Shedder turns away none of the
// requests that would have succeeded.
func TestSlowFailuresDoNotShedTheSuccessesBesideThem(t *testing.T) {
	for seed := range uint64(3) {
		rs, st := simulateCalls(t, newShedder(t), seed,
			callPhase{rate: 200, dur: 3 * time.Second, hold: healthyCall},
			callPhase{rate: 200, dur: 2 * time.Second, hold: healthyCall, fail: 0.5, failHold: failingCall},
		)
		t.Logf("seed %d: healthy %d/%d shed, half failing %d/%d shed (limit %d, baseline %v)",
			seed, rs[0].rejected, rs[0].arrived, rs[1].rejected, rs[1].arrived, st[1].Limit, st[1].Baseline)
		assert.Zero(t, rs[0].rejected, "seed %d", seed)
		assert.LessOrEqual(t, rs[1].rejected, rs[1].arrived/100, "seed %d: shed while not overloaded", seed)
	}
}

// Failures as slow as 4 baselines are a timeout's, which a queue makes: all
// calls failing after 200 ms where they took 20 cut the limit.
func TestTimeoutsStillCutTheLimit(t *testing.T) {
	rs, st := simulateCalls(t, newShedder(t), 1,
		callPhase{rate: 200, dur: 3 * time.Second, hold: healthyCall},
		callPhase{rate: 200, dur: time.Second, fail: 1, failHold: 10 * healthyCall},
	)
	t.Logf("timing out: %d/%d shed, limit %d", rs[1].rejected, rs[1].arrived, st[1].Limit)
	assert.Less(t, st[1].Limit, st[0].Limit, "the limit after a second of timeouts")
}
