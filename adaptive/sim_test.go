package adaptive_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
)

// simServer has a fixed capacity: workers requests are served at once, each
// for service; more concurrency only queues (FIFO) for a worker.
// With jitter j, each service time is drawn uniformly from
// service × [1-j, 1+j].
type simServer struct {
	sem     chan struct{}
	service time.Duration
	jitter  float64
	mu      sync.Mutex
	rnd     *rand.Rand
}

func (s *simServer) serve() {
	s.sem <- struct{}{}
	d := s.service
	if s.jitter > 0 {
		s.mu.Lock()
		d = time.Duration(float64(d) * (1 - s.jitter + 2*s.jitter*s.rnd.Float64()))
		s.mu.Unlock()
	}
	time.Sleep(d)
	<-s.sem
}

type simWindow struct {
	limit   int64
	probing bool
	calls   int64
	avgLat  time.Duration
}

// runSim drives lim with a closed loop of callers against a server of
// workers × service for windows windows of length every, inside a synctest
// bubble, and returns what each window saw. Callers over the limit either
// wait in the limit's queue or, when rejected, back off for backoff.
func runSim(t *testing.T, lim *adaptive.ConcurrencyLimit, callers, windows int, every, backoff time.Duration, jitter float64) []simWindow {
	t.Helper()
	var out []simWindow
	synctest.Test(t, func(t *testing.T) {
		srv := &simServer{sem: make(chan struct{}, 8), service: 10 * time.Millisecond,
			jitter: jitter, rnd: rand.New(rand.NewPCG(1, 2))}
		g, err := sluice.New(sluice.With(lim), sluice.WithClock(sluice.NewMonotonicClock()))
		require.NoError(t, err)
		defer g.Close()
		ctx, cancel := context.WithCancel(context.Background())
		var latSum, latN atomic.Int64
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for ctx.Err() == nil {
					err := g.Do(ctx, func(context.Context) error {
						start := time.Now()
						srv.serve()
						latSum.Add(int64(time.Since(start)))
						latN.Add(1)
						return nil
					})
					if errors.Is(err, sluice.ErrRejected) && ctx.Err() == nil {
						time.Sleep(backoff)
					}
				}
			})
		}
		for range windows {
			time.Sleep(every)
			st := lim.Stats()
			n, sum := latN.Swap(0), latSum.Swap(0)
			w := simWindow{limit: st.Limit, probing: st.Probing, calls: n}
			if n > 0 {
				w.avgLat = time.Duration(sum / n)
			}
			out = append(out, w)
		}
		cancel()
		wg.Wait()
	})
	return out
}

// checkConverged checks that from window from on, every window not running a
// probe has a limit within ±30% of the capacity of 8 and an admitted latency
// within 2× the unloaded 10 ms, and reports the averages.
func checkConverged(t *testing.T, ws []simWindow, from int) {
	t.Helper()
	var limSum, latSum, n, probes int64
	for i, w := range ws {
		t.Logf("window %2d: limit %3d probing %-5v calls %4d avg latency %v", i, w.limit, w.probing, w.calls, w.avgLat)
		if i < from {
			continue
		}
		if w.probing {
			probes++
			continue
		}
		assert.InDelta(t, 8, float64(w.limit), 8*0.3, "window %d: limit %d", i, w.limit)
		assert.LessOrEqual(t, w.avgLat, 20*time.Millisecond, "window %d", i)
		limSum += w.limit
		latSum += int64(w.avgLat)
		n++
	}
	require.Positive(t, n)
	t.Logf("converged by window %d: mean limit %.2f, mean admitted latency %v (unloaded 10ms), %d probe windows",
		from, float64(limSum)/float64(n), time.Duration(latSum/n), probes)
}

// TestGradientConvergesQueued: 64 callers that wait in the limit's queue.
func TestGradientConvergesQueued(t *testing.T) {
	lim, err := adaptive.NewConcurrencyLimit(adaptive.WithQueue(64, 0))
	require.NoError(t, err)
	ws := runSim(t, lim, 64, 40, 500*time.Millisecond, 0, 0)
	checkConverged(t, ws, 16)
}

// TestGradientConvergesRejecting: 64 callers rejected over the limit, each
// retrying after 5 ms.
func TestGradientConvergesRejecting(t *testing.T) {
	lim, err := adaptive.NewConcurrencyLimit()
	require.NoError(t, err)
	ws := runSim(t, lim, 64, 40, 500*time.Millisecond, 5*time.Millisecond, 0)
	checkConverged(t, ws, 16)
}

// TestGradientConvergesJittered: service times spread uniformly over
// 4 ms to 16 ms (mean 10 ms) do not keep the limit from the capacity.
func TestGradientConvergesJittered(t *testing.T) {
	lim, err := adaptive.NewConcurrencyLimit(adaptive.WithQueue(64, 0))
	require.NoError(t, err)
	ws := runSim(t, lim, 64, 40, 500*time.Millisecond, 0, 0.6)
	checkConverged(t, ws, 16)
}

// TestAIMDOnSimulatedServer: AIMD needs to be told what "slow" is; with a
// Timeout of 1.5× the unloaded latency it backs off as soon as requests queue
// for a worker, and keeps admitted latency within 2×.
func TestAIMDOnSimulatedServer(t *testing.T) {
	lim, err := adaptive.NewConcurrencyLimit(adaptive.WithQueue(64, 0),
		adaptive.WithAlgorithm(adaptive.AIMD{Timeout: 15 * time.Millisecond}))
	require.NoError(t, err)
	ws := runSim(t, lim, 64, 40, 500*time.Millisecond, 0, 0)
	var limSum, latSum int64
	for i, w := range ws {
		t.Logf("window %2d: limit %3d calls %4d avg latency %v", i, w.limit, w.calls, w.avgLat)
		if i >= 16 {
			assert.InDelta(t, 8, float64(w.limit), 8*0.3, "window %d: limit %d", i, w.limit)
			assert.LessOrEqual(t, w.avgLat, 20*time.Millisecond, "window %d", i)
			assert.GreaterOrEqual(t, w.calls, int64(300), "window %d: throughput", i)
			limSum += w.limit
			latSum += int64(w.avgLat)
		}
	}
	t.Logf("AIMD from window 16: mean limit %.2f, mean admitted latency %v", float64(limSum)/24, time.Duration(latSum/24))
}
