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
