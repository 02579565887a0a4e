package adaptive_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/policytest"
)

const ms = time.Millisecond

// model is a simulated service, stepped one millisecond at a time: it
// reports how much work each request in it gets in the step.
type model interface {
	// share returns the work, in ms, done in one ms for the i-th of n
	// requests in the service (in order of arrival).
	share(i, n int) float64
	// work is the work of one request, in ms.
	work() float64
}

// cpuModel is a CPU-bound service: each request needs service ms of CPU,
// and cores run all the requests in it by turns, so that every request
// slows down once more than cores are in it. The queue is in the
// scheduler, behind the Shedder: only latency shows it.
type cpuModel struct {
	cores   int
	service float64
}

func (m cpuModel) share(_, n int) float64 { return min(1, float64(m.cores)/float64(n)) }
func (m cpuModel) work() float64          { return m.service }

// poolModel is a service bound by a pool of size connections, each held
// for hold ms; requests beyond them wait for one, in order.
type poolModel struct {
	size int
	hold float64
}

func (m poolModel) share(i, _ int) float64 {
	if i < m.size {
		return 1
	}
	return 0
}
func (m poolModel) work() float64 { return m.hold }

// phase is a stretch of open-loop Poisson arrivals at rate per second.
type phase struct {
	rate float64
	dur  time.Duration
}

// phaseResult is what the requests that arrived in one phase got.
type phaseResult struct {
	arrived, admitted, rejected int
	good                        int           // answered within 250 ms
	p99                         time.Duration // of admitted requests, from arrival
	lastReject                  time.Duration // since the phase's start; -1 if none
}

// simulate plays phases against a Shedder in front of m, in a synctest
// bubble, and returns what each phase's requests got and the Shedder's
// Stats at the end of each phase.
func simulate(t *testing.T, s *adaptive.Shedder, m model, seed uint64, phases ...phase) ([]phaseResult, []adaptive.Stats) {
	t.Helper()
	type job struct {
		left float64
		done chan struct{}
	}
	type record struct {
		phase    int
		arrival  time.Duration
		admitted bool
		latency  time.Duration
	}
	var results []phaseResult
	var stats []adaptive.Stats
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		var mu sync.Mutex
		var jobs []*job
		var records []record
		var wg sync.WaitGroup
		rng := rand.New(rand.NewPCG(seed, 1))
		ctx := context.Background()
		var starts []time.Duration
		for p, ph := range phases {
			starts = append(starts, now())
			end := now() + ph.dur
			next := now() + time.Duration(rng.ExpFloat64()/ph.rate*float64(time.Second))
			for now() < end {
				for next < now()+time.Millisecond {
					at := now()
					wg.Go(func() {
						v := policytest.AnswerOf(s.Admit(ctx, at))
						tk := v.Ticket
						if v.Cause != nil {
							mu.Lock()
							records = append(records, record{phase: p, arrival: at})
							mu.Unlock()
							return
						}
						start := now()
						j := &job{left: m.work(), done: make(chan struct{})}
						mu.Lock()
						jobs = append(jobs, j)
						mu.Unlock()
						<-j.done
						end := now()
						s.Done(tk, sluice.Success, end, end-start)
						mu.Lock()
						records = append(records, record{phase: p, arrival: at, admitted: true, latency: end - at})
						mu.Unlock()
					})
					next += time.Duration(rng.ExpFloat64() / ph.rate * float64(time.Second))
				}
				synctest.Wait()
				time.Sleep(time.Millisecond)
				mu.Lock()
				kept := jobs[:0]
				for i, j := range jobs {
					j.left -= m.share(i, len(jobs))
					if j.left <= 1e-9 {
						close(j.done)
						continue
					}
					kept = append(kept, j)
				}
				jobs = kept
				mu.Unlock()
			}
			stats = append(stats, s.Stats())
		}
		// Let the last requests finish.
		for {
			synctest.Wait()
			mu.Lock()
			n := len(jobs)
			kept := jobs[:0]
			for i, j := range jobs {
				j.left -= m.share(i, len(jobs))
				if j.left <= 1e-9 {
					close(j.done)
					continue
				}
				kept = append(kept, j)
			}
			jobs = kept
			mu.Unlock()
			if n == 0 && s.Stats().Waiting == 0 && s.Stats().Inflight == 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		wg.Wait()
		results = make([]phaseResult, len(phases))
		lats := make([][]time.Duration, len(phases))
		for i := range results {
			results[i].lastReject = -1
		}
		for _, r := range records {
			res := &results[r.phase]
			res.arrived++
			if !r.admitted {
				res.rejected++
				res.lastReject = max(res.lastReject, r.arrival-starts[r.phase])
				continue
			}
			res.admitted++
			if r.latency <= 250*time.Millisecond {
				res.good++
			}
			lats[r.phase] = append(lats[r.phase], r.latency)
		}
		for i, l := range lats {
			slices.Sort(l)
			if len(l) > 0 {
				results[i].p99 = l[len(l)*99/100]
			}
		}
	})
	return results, stats
}

// newShedder returns a Shedder made as on a machine of 2 processors, the
// lowest limit it keeps whatever the latency.
func newShedder(t *testing.T, opts ...adaptive.Option) *adaptive.Shedder {
	t.Helper()
	old := runtime.GOMAXPROCS(2)
	s, err := adaptive.NewShedder(opts...)
	runtime.GOMAXPROCS(old)
	require.NoError(t, err)
	return s
}
