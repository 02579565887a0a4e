package breaker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
)

// model is a plain, slow reference of the closed state's trip decision: it
// keeps every counted call and recomputes the conditions from scratch.
type model struct {
	count            int           // count window size; 0 for a rolling window
	length, width    time.Duration // rolling window
	consecutive      int
	ratio            float64
	ratioMin         int
	errCount, errMin int
	slow             time.Duration
	slowRatio        float64
	slowMin          int
	calls            []modelCall
	run              int
	runStart         int64 // epoch of the run's first failure
}

type modelCall struct {
	at         time.Duration
	fail, slow bool
}

func (m *model) epoch(at time.Duration) int64 { return int64(at / m.width) }

// record adds a call and reports whether the breaker must trip.
func (m *model) record(at time.Duration, o sluice.Outcome, latency time.Duration) bool {
	if o != sluice.Success && o != sluice.Failure {
		return false
	}
	c := modelCall{at: at, fail: o == sluice.Failure, slow: m.slow > 0 && latency > m.slow}
	m.calls = append(m.calls, c)
	if c.fail {
		if m.count > 0 {
			// A count window: runs never expire.
		} else if m.run == 0 || m.epoch(at)-m.runStart >= int64(m.length/m.width) {
			m.run, m.runStart = 0, m.epoch(at)
		}
		m.run++
	} else {
		m.run = 0
	}
	var in []modelCall
	if m.count > 0 {
		in = m.calls[max(0, len(m.calls)-m.count):]
	} else {
		n := int64(m.length / m.width)
		for _, x := range m.calls {
			if m.epoch(x.at) > m.epoch(at)-n {
				in = append(in, x)
			}
		}
	}
	total, fails, slows := len(in), 0, 0
	for _, x := range in {
		if x.fail {
			fails++
		}
		if x.slow {
			slows++
		}
	}
	switch {
	case m.consecutive > 0 && m.run >= m.consecutive:
		return true
	case m.ratio > 0 && total >= m.ratioMin && float64(fails) >= m.ratio*float64(total)-1e-9:
		return true
	case m.errCount > 0 && total >= m.errMin && fails >= m.errCount:
		return true
	case m.slowRatio > 0 && total >= m.slowMin && float64(slows) >= m.slowRatio*float64(total)-1e-9:
		return true
	}
	return false
}

func randomModel(r *rand.Rand) (*model, []breaker.Option) {
	m := &model{}
	var opts []breaker.Option
	if r.IntN(2) == 0 {
		m.count = 1 + r.IntN(20)
		opts = append(opts, breaker.WithCountWindow(m.count))
	} else {
		buckets := 1 + r.IntN(10)
		m.width = time.Duration(1+r.IntN(5)) * ms
		m.length = m.width * time.Duration(buckets)
		opts = append(opts, breaker.WithRollingWindow(m.length, buckets))
	}
	limit := func() int {
		if m.count > 0 {
			return 1 + r.IntN(m.count)
		}
		return 1 + r.IntN(20)
	}
	// Each strategy at most once: an option given twice is an error.
	var chosen [4]bool
	for len(opts) < 2 || r.IntN(2) == 0 {
		k := r.IntN(4)
		if chosen[k] {
			if chosen == [4]bool{true, true, true, true} {
				break
			}
			continue
		}
		chosen[k] = true
		switch k {
		case 0:
			m.consecutive = 1 + r.IntN(6)
			opts = append(opts, breaker.WithConsecutiveFailures(m.consecutive))
		case 1:
			m.ratio, m.ratioMin = float64(1+r.IntN(10))/10, limit()
			opts = append(opts, breaker.WithErrorRatio(m.ratio, m.ratioMin))
		case 2:
			m.errCount, m.errMin = limit(), limit()
			opts = append(opts, breaker.WithErrorCount(m.errCount, m.errMin))
		case 3:
			m.slow, m.slowRatio, m.slowMin = 10*ms, float64(1+r.IntN(10))/10, limit()
			opts = append(opts, breaker.WithSlowCallRatio(m.slow, m.slowRatio, m.slowMin))
		}
	}
	if m.consecutive == 0 && m.ratio == 0 && m.errCount == 0 && m.slowRatio == 0 {
		m.consecutive = 5 // the default
	}
	return m, opts
}

func TestClosedStateMatchesReferenceModel(t *testing.T) {
	ctx := context.Background()
	outcomes := []sluice.Outcome{S, S, S, F, F, I, R}
	tripped := 0
	for seed := range uint64(400) {
		r := rand.New(rand.NewPCG(seed, 99))
		m, opts := randomModel(r)
		b := mustNew(t, opts...)
		desc := fmt.Sprintf("seed %d: %+v", seed, *m)
		now := time.Duration(r.IntN(1000)) * ms
		for step := range 300 {
			now += time.Duration(r.IntN(3)) * ms
			o := outcomes[r.IntN(len(outcomes))]
			lat := time.Duration(r.IntN(20)) * ms
			d, tk := admit(b, ctx, now)
			require.True(t, d.Allowed, "%s: step %d admitted", desc, step)
			b.Done(tk, o, now, lat)
			want := m.record(now, o, lat)
			if want {
				require.Equal(t, breaker.StateOpen, b.State(), "%s: step %d must trip", desc, step)
				tripped++
				break
			}
			require.Equal(t, breaker.StateClosed, b.State(), "%s: step %d must not trip", desc, step)
		}
	}
	// The random configurations must cover both sides.
	t.Logf("%d of 400 configurations tripped", tripped)
	assert.Greater(t, tripped, 100)
	assert.Less(t, tripped, 400)
}

func TestConcurrentFailuresTripOnce(t *testing.T) {
	for _, opts := range [][]breaker.Option{
		{breaker.WithConsecutiveFailures(3)},
		{breaker.WithErrorRatio(0.5, 10), breaker.WithRollingWindow(sec, 10)},
	} {
		var opened atomic.Int64
		var changes atomic.Int64
		b := mustNew(t, opts...)
		b.Subscribe(func(c sluice.StateChange) {
			changes.Add(1)
			if c.To == breaker.StateOpen.String() {
				opened.Add(1)
			}
		})
		var wg sync.WaitGroup
		var start sync.WaitGroup
		start.Add(1)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.Wait()
				for range 20 {
					d, tk := admit(b, context.Background(), ms)
					if d.Allowed {
						b.Done(tk, F, ms, 0)
					}
				}
			}()
		}
		start.Done()
		wg.Wait()
		assert.Equal(t, breaker.StateOpen, b.State())
		assert.Equal(t, int64(1), opened.Load(), "one trip, one transition")
		assert.Equal(t, int64(1), changes.Load())
	}
}

func TestStressTransitionsAndCallsKeepListenersInOrder(t *testing.T) {
	b := mustNew(t, breaker.WithRollingWindow(50*ms, 5), breaker.WithErrorRatio(0.3, 5),
		breaker.WithOpenDuration(2*ms), breaker.WithHalfOpenProbes(3, 0.6))
	log := hear(b)
	var clock atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range 2000 {
				now := time.Duration(clock.Add(int64(50 * time.Microsecond)))
				d, tk := admit(b, context.Background(), now)
				if !d.Allowed {
					continue
				}
				b.Done(tk, []sluice.Outcome{S, S, F, I, R}[r.IntN(5)], now, time.Millisecond)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 300 {
			switch i % 4 {
			case 0:
				b.ForceOpen()
			case 1:
				b.Reset()
			case 2:
				b.OpenFor(context.Background(), time.Duration(clock.Load()), ms)
			default:
				_ = b.Counts()
			}
		}
	}()
	wg.Wait()
	seen := log.all()
	require.NotEmpty(t, seen)
	assert.Equal(t, "closed", seen[0].From)
	for i := 1; i < len(seen); i++ {
		require.Equal(t, seen[i-1].To, seen[i].From, "change %d", i)
	}
	assert.Equal(t, b.State().String(), seen[len(seen)-1].To)
	c := b.Counts()
	assert.LessOrEqual(t, c.ProbesAdmitted, int64(3), "never more probes than configured")
}
