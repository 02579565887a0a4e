package adaptive_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/shedhook"
)

// poolRun drives s one ms at a time: Poisson arrivals at rate(ms) a second,
// served by a pool of size connections each held hold(ms) ms (FIFO behind
// it), a call still running timeout ms after its slot cut short (as a
// Guard's WithTimeout tells it), 0 for none. It returns, per second, the
// requests shed and admitted, the probes begun and the Stats at its end.
type poolSecond struct {
	shed, admitted, ok, cut, probes, probingMs int
	starts, ends                               []int // ms a probe began, ended
	st                                         adaptive.Stats
}

func poolRun(t *testing.T, s *adaptive.Shedder, secs int, seed uint64, rate func(ms int) float64, hold func(ms int) float64, size, timeout int) []poolSecond {
	type req struct {
		t     sluice.Ticket
		start int
		left  float64
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	ctx := context.Background()
	at := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	var inflight []*req
	out := make([]poolSecond, secs)
	probing := false
	next := 0.0
	for ms := 0; ms < secs*1000; ms++ {
		sec := &out[ms/1000]
		for next < float64(ms+1) {
			tk, _, err := s.Admit(ctx, at(ms))
			if err != nil {
				sec.shed++
			} else {
				sec.admitted++
				inflight = append(inflight, &req{t: tk, start: ms, left: hold(ms)})
			}
			next += rng.ExpFloat64() / rate(ms) * 1000
		}
		kept := inflight[:0]
		for i, r := range inflight {
			if i < size {
				r.left--
			}
			age := ms + 1 - r.start
			switch {
			case r.left <= 0:
				s.Done(r.t, sluice.Success, at(ms+1), at(age))
				sec.ok++
			case timeout > 0 && age >= timeout:
				shedhook.CutShort(s, uint64(r.t), uint8(sluice.Failure), at(ms+1), at(age))
				sec.cut++
			default:
				kept = append(kept, r)
			}
		}
		inflight = kept
		if s.Stats().Probing {
			sec.probingMs++
		}
		if p := s.Stats().Probing; p != probing {
			probing = p
			if p {
				sec.probes++
				sec.starts = append(sec.starts, ms)
			} else {
				sec.ends = append(sec.ends, ms)
			}
		}
		if ms%1000 == 999 {
			sec.st = s.Stats()
		}
	}
	for i, c := range out {
		t.Logf("t=%2ds admitted %4d ok %4d cut %4d shed %4d probes %d (%d ms) | limit %d baseline %v avg %v", i+1, c.admitted, c.ok, c.cut, c.shed, c.probes, c.probingMs, c.st.Limit, c.st.Baseline, c.st.AvgRT)
	}
	return out
}

// A pool of 16 connections held 1 s each (16 requests a second) under
// twice that load. Its probes are scheduled while the limit binds, with a
// queue behind it, and their cohorts (10 calls of 1 s at 3/4 of the limit)
// still run at the 1 s cap. The queued window's average before such a
// probe is no floor of its baseline, as it is for a probe a rise asked for
// while the limit did not bind. (Taken for one, the baseline ratcheted up
// with the queue, 1 s to 4 s in a minute, the queue read as none, and the
// limit climbed to 100 over a pool of 16.) Nor are the cohort's young ages
// a fall: the baseline stays where it was.
func TestScheduledProbeStillRunningTakesNoQueueForBaseline(t *testing.T) {
	s := newShedder(t, adaptive.WithQueue(0, 0))
	secs := poolRun(t, s, 60, 1, func(int) float64 { return 32 }, func(int) float64 { return 1000 }, 16, 0)
	var worst adaptive.Stats
	for _, c := range secs {
		if c.st.Baseline > worst.Baseline {
			worst = c.st
		}
	}
	if worst.Baseline > 1500*time.Millisecond {
		t.Errorf("baseline %v (limit %d) for a pool whose calls take 1 s unqueued: a probe still running took the queued window for its baseline", worst.Baseline, worst.Limit)
	}
}

// A pool-bound service whose probes have measured its baseline (20 ms),
// then a dependency that hangs past a 100 ms timeout: every call is cut
// (shedhook.CutShort). Each probe's cohort is all bounds, and the next
// probe comes a second after it at the soonest, though the limit, at its
// floor, is far under half of what the last measuring probe left. (Read
// against that probe's instant, it asked for the next within a window or
// two, and the service ran probing, at 2 rather than 3, most of the time.)
func TestProbeThatCutsKeepsTheNextASecondOff(t *testing.T) {
	s := newShedder(t, adaptive.WithQueue(0, 0))
	secs := poolRun(t, s, 16, 1, func(int) float64 { return 1600 }, func(ms int) float64 {
		if ms >= 5000 {
			return 1e9 // hangs
		}
		return 20
	}, 16, 100)
	var starts, ends []int
	for _, c := range secs[6:] { // the hang, once its first probe is done
		starts = append(starts, c.starts...)
		ends = append(ends, c.ends...)
	}
	for _, e := range ends {
		for _, st := range starts {
			if st > e {
				if st-e < 1000 {
					t.Errorf("a probe of bounds ended at %d ms, and the next began at %d ms: %d ms after, not a second", e, st, st-e)
				}
				break
			}
		}
	}
}

// A pool of 16 whose calls take 400 ms (±30 %) at twice its capacity,
// until at 10 s its dependency turns slower for good: 1.5 s a call, past
// 1 s, and the pool now carries 10.7 requests a second. A probe waits for
// its cohort up to 4 baselines, not 1 s, and one that still ran cuts
// nothing and keeps the limit the last measuring probe left: the new
// baseline is found and most of the new capacity served. (Judged by ages
// under 1 s, the baseline could rise no higher, a probe cut against it
// and recorded the cut as its resume point, and the limit sat at its
// floor of 3 for good: 2-4 requests a second served.)
func TestShedderResumesAfterADependencySlowerThanTheProbeWaits(t *testing.T) {
	for seed := range uint64(6) {
		s := newShedder(t, adaptive.WithQueue(0, 0))
		jr := rand.New(rand.NewPCG(seed, 3))
		secs := poolRun(t, s, 50, seed, func(int) float64 { return 80 }, func(ms int) float64 {
			h := 400.0
			if ms >= 10000 {
				h = 1500
			}
			return h * (1 + 0.3*(2*jr.Float64()-1))
		}, 16, 0)
		ok := 0
		for _, c := range secs[30:] {
			ok += c.ok
		}
		perSec := float64(ok) / 20
		t.Logf("seed %d: %.1f served a second over 30-50 s, of 10.7; limit %d, baseline %v", seed, perSec, secs[49].st.Limit, secs[49].st.Baseline)
		if perSec < 10.7/2 {
			t.Errorf("seed %d: %.1f requests a second served of the 10.7 the slower pool carries (limit %d, baseline %v): the limit did not resume", seed, perSec, secs[49].st.Limit, secs[49].st.Baseline)
		}
	}
}

// A pool of 16 whose calls take 20 ms, at twice its capacity, behind a
// Guard WithTimeout(100ms); its dependency hangs (every call cut at the
// timeout) and then heals. The probe that spans the heal has a cohort of
// a few timeouts and more successes: fewer than half bounds, so it
// measures, from its successes alone; the baseline stays 20 ms. (With its
// timeouts in, at 4 baselines, it measured 33-36 ms, and the limit climbed
// to twice the pool, whose queue doubled every call's latency, for the
// next 10 s.)
func TestProbeAcrossAHealTakesNoTimeoutsForBaseline(t *testing.T) {
	for _, c := range []struct{ hang, heal, secs int }{{5000, 10000, 16}, {60000, 70000, 80}} {
		for seed := range uint64(4) {
			s := newShedder(t, adaptive.WithQueue(0, 0))
			secs := poolRun(t, s, c.secs, seed, func(int) float64 { return 1600 }, func(ms int) float64 {
				if ms >= c.hang && ms < c.heal {
					return 1e9 // hangs, cut at the timeout
				}
				return 20
			}, 16, 100)
			for i, x := range secs[c.heal/1000+2:] {
				if x.st.Baseline > 26*time.Millisecond || x.st.Limit > 24 {
					t.Errorf("hang %d-%d ms, seed %d: %d s after the heal, baseline %v, limit %d over a pool of 16 whose calls take 20 ms: a probe took timeouts for its baseline",
						c.hang, c.heal, seed, i+3, x.st.Baseline, x.st.Limit)
					break
				}
			}
		}
	}
}
