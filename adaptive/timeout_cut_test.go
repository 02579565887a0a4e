package adaptive_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/shedhook"
)

// timeoutCounts are what runTimeouts's requests got in one phase.
type timeoutCounts struct{ ok, timedOut, shed int }

// runTimeouts plays a CPU-bound service (2 cores, 4 ms of CPU a request)
// behind policy p in a Guard WithTimeout(12ms), 3 baselines: 200 requests
// a second for 3 s (healthy), then 1000 (twice its capacity) for 3 s. A
// call its deadline ends is ended as the Guard ends it (shedhook.Cut, or
// p's Done when Cut declines it). It returns the counts of each phase.
func runTimeouts(t *testing.T, p sluice.Policy) [2]timeoutCounts {
	t.Helper()
	const (
		cores   = 2.0
		service = 4.0 // ms of CPU
		timeout = 12  // ms
	)
	type req struct {
		t     sluice.Ticket
		start int
		done  float64
	}
	var inflight []*req
	ctx := sluice.WithKey(context.Background(), "k")
	at := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	var c [2]timeoutCounts
	for ms := 0; ms < 6000; ms++ {
		phase, every := 0, 5
		if ms >= 3000 {
			phase, every = 1, 1
		}
		if ms%every == 0 {
			tk, _, err := p.Admit(ctx, at(ms))
			if err != nil {
				c[phase].shed++
			} else {
				inflight = append(inflight, &req{t: tk, start: ms})
			}
		}
		share := min(1, cores/float64(len(inflight)))
		kept := inflight[:0]
		for _, r := range inflight {
			r.done += share
			switch {
			case r.done >= service:
				p.Done(r.t, sluice.Success, at(ms+1), at(ms+1-r.start))
				c[phase].ok++
			case ms+1-r.start >= timeout:
				if !shedhook.Cut(p, uint64(r.t), uint8(sluice.Failure), at(ms+1), at(timeout)) {
					p.Done(r.t, sluice.Failure, at(ms+1), at(timeout))
				}
				c[phase].timedOut++
			default:
				kept = append(kept, r)
			}
		}
		inflight = kept
	}
	return c
}

// The service of runTimeouts behind a Shedder: at twice its capacity the
// queue is the service's own, in the scheduler: every call in flight
// slows down, passes its 12 ms and fails as a timeout (a Failure at the
// timeout's latency, as the Guard reports it). Those timeouts feed the
// limit and cut it, so that the few in flight finish in time, rather than
// nearly every request timing out.
func TestTimeoutsOfAFewBaselinesCutTheLimit(t *testing.T) {
	s := newShedder(t, adaptive.WithQueue(0, 0))
	c := runTimeouts(t, s)
	st := s.Stats()
	t.Logf("healthy: %+v; overload: %+v; limit %d, baseline %v", c[0], c[1], st.Limit, st.Baseline)
	if st.Limit > 6 {
		t.Errorf("limit %d after 3 s in which the calls timed out: the Shedder did not see the overload", st.Limit)
	}
	if c[1].ok < 1000 { // capacity 500/s × 3 s = 1500
		t.Errorf("%d of the overload's requests succeeded in 3 s, where the service can carry 1500", c[1].ok)
	}
}

// A dependency that hangs past a Guard's 100 ms timeout at 200 requests a
// second, for 12 s: every admitted call is cut at 100 ms (a bound, told
// through shedhook.CutShort). The first windows cut the limit, and so do
// the probes scheduled after: their cohorts measure nothing but bounds,
// which are no baseline. (Taken for one, 84 ms, then the timeout itself,
// they read as an unqueued service: the limit climbed past 20 and
// shedding stopped while every call timed out.) Healed, the service is
// shed nothing 2 s on.
func TestShedderTakesNoTimeoutForItsBaseline(t *testing.T) {
	s := newShedder(t, adaptive.WithQueue(0, 0)) // the queue would wait on the wall clock
	ctx := context.Background()
	at := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	type req struct {
		t     sluice.Ticket
		start int
	}
	var inflight []req
	shed := map[int]int{}
	admitted := map[int]int{}
	var sick16 adaptive.Stats
	for ms := 0; ms < 20000; ms++ {
		sick := ms >= 3000 && ms < 16000 // healed for the last 4 s
		if ms%5 == 0 {
			tk, _, err := s.Admit(ctx, at(ms))
			if err != nil {
				shed[ms/1000]++
			} else {
				admitted[ms/1000]++
				inflight = append(inflight, req{tk, ms})
			}
		}
		kept := inflight[:0]
		for _, r := range inflight {
			age := ms + 1 - r.start
			switch {
			case !sick && age >= 20:
				s.Done(r.t, sluice.Success, at(ms+1), at(age))
			case sick && age >= 100:
				shedhook.CutShort(s, uint64(r.t), uint8(sluice.Failure), at(ms+1), at(age))
			default:
				kept = append(kept, r)
			}
		}
		inflight = kept
		if ms == 15999 {
			sick16 = s.Stats()
		}
		if ms%1000 == 999 {
			st := s.Stats()
			t.Logf("t=%2ds admitted %3d shed %3d | Limit %d Baseline %v Probing %v", ms/1000+1, admitted[ms/1000], shed[ms/1000], st.Limit, st.Baseline, st.Probing)
		}
	}
	st := s.Stats()
	if sick16.Baseline > 50*time.Millisecond {
		t.Errorf("Baseline %v after 13 s of calls a 100 ms deadline cut: the timeouts were taken for the baseline (limit %d)", sick16.Baseline, sick16.Limit)
	}
	if shed[15] == 0 {
		t.Errorf("nothing shed in the 13th second of a dependency that times out every call")
	}
	if shed[18]+shed[19] > 0 {
		t.Errorf("%d shed in the last 2 s, 2 s after the dependency healed (limit %d)", shed[18]+shed[19], st.Limit)
	}
}
