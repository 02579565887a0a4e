package adaptive_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
)

const ms = time.Millisecond

// newTestGuard returns a Guard over a 1 s window of ten 100 ms buckets, fed
// by a ManualSampler.
func newTestGuard(t *testing.T, s *adaptive.ManualSampler, opts ...adaptive.Option) *adaptive.Guard {
	t.Helper()
	opts = append([]adaptive.Option{adaptive.WithSampler(s), adaptive.WithWindow(time.Second, 10)}, opts...)
	g, err := adaptive.NewGuard(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// warm feeds buckets [0, n) with perBucket requests each, ending within the
// bucket with latency rt: maxPass = perBucket and minRT = rt.
func warm(t *testing.T, g *adaptive.Guard, n, perBucket int, rt time.Duration) time.Duration {
	t.Helper()
	ctx := context.Background()
	for b := range n {
		at := time.Duration(b) * 100 * ms
		for range perBucket {
			d, tk := admit(g, ctx, at)
			require.True(t, d.Allowed, "warm-up must pass: %+v", d)
			g.Done(tk, sluice.Success, at+rt, rt)
		}
	}
	return time.Duration(n) * 100 * ms
}

type step struct {
	name     string
	at       time.Duration
	cpu      float64
	critical bool
	finish   int // requests held in flight to finish before this step
	want     error
	state    string
}

// TestGuardCalmOverloadRecovery walks the BBR guard through calm, overload
// and recovery: with maxPass 10 per 100 ms bucket and minRT 20 ms it may hold
// 10 × 20ms / 100ms = 2 in flight once CPU is above 0.8, it sheds exactly
// beyond that, stays cautious for the 1 s cool-off and then stops.
func TestGuardCalmOverloadRecovery(t *testing.T) {
	s := adaptive.NewManualSampler(0.3, 0)
	g := newTestGuard(t, s)
	var changes []sluice.StateChange
	unsub := g.Subscribe(func(c sluice.StateChange) { changes = append(changes, c) })
	defer unsub()

	now := warm(t, g, 10, 10, 20*ms)
	held := []sluice.Ticket{}
	ctx := context.Background()
	critCtx := sluice.WithPriority(ctx, sluice.PriorityCritical)

	steps := []step{
		// Calm: CPU low, inflight is never checked.
		{name: "calm 1", at: now, cpu: 0.3},
		{name: "calm 2", at: now, cpu: 0.3},
		{name: "calm 3", at: now, cpu: 0.3},
		{name: "calm 4", at: now, cpu: 0.3},
		// Overload: 4 in flight > 2.
		{name: "overload sheds", at: now, cpu: 0.9, want: adaptive.ErrCPUOverload, state: "shedding"},
		{name: "critical survives below 0.95", at: now, cpu: 0.9, critical: true},
		{name: "critical shed above 0.95", at: now + 10*ms, cpu: 0.97, critical: true, want: adaptive.ErrCPUOverload},
		// Back to 2 in flight: at capacity, not over it.
		{name: "at capacity passes", at: now + 20*ms, cpu: 0.9, finish: 3},
		{name: "over capacity sheds", at: now + 30*ms, cpu: 0.9, want: adaptive.ErrCPUOverload},
		// CPU dips, but the cool-off (1 s after the last shed at now+30ms)
		// keeps the guard cautious.
		{name: "cool-off keeps shedding", at: now + 500*ms, cpu: 0.3, want: adaptive.ErrCPUOverload},
		{name: "cool-off: critical passes", at: now + 510*ms, cpu: 0.3, critical: true},
		// 1 s after the last shed (now+500ms): normal again.
		{name: "after cool-off", at: now + 1500*ms, cpu: 0.3, state: "normal"},
		{name: "after cool-off 2", at: now + 1500*ms, cpu: 0.3},
	}
	for _, st := range steps {
		for range st.finish {
			g.Done(held[0], sluice.Success, st.at, 20*ms)
			held = held[1:]
		}
		s.SetCPU(st.cpu)
		c := ctx
		if st.critical {
			c = critCtx
		}
		inflight := g.Stats().Inflight
		d, tk := admit(g, c, st.at)
		if st.want != nil {
			require.False(t, d.Allowed, "%s: inflight %d: %+v", st.name, inflight, d)
			require.ErrorIs(t, d.Cause, st.want, st.name)
			require.ErrorIs(t, d.Cause, sluice.ErrOverloaded, st.name)
			assert.Equal(t, int64(-1), d.Limit, st.name)
			assert.Equal(t, time.Second, d.RetryAfter, st.name)
		} else {
			require.True(t, d.Allowed, "%s: inflight %d: %+v", st.name, inflight, d)
			held = append(held, tk)
		}
		if st.state != "" {
			assert.Equal(t, st.state, g.State(), st.name)
		}
	}
	require.Len(t, changes, 2)
	assert.Equal(t, sluice.StateChange{Policy: "adaptive/bbr", From: "normal", To: "shedding", At: now}, changes[0])
	assert.Equal(t, sluice.StateChange{Policy: "adaptive/bbr", From: "shedding", To: "normal", At: now + 1500*ms}, changes[1])
}

// TestGuardEstimate pins maxPass × minRT / bucket: the busiest bucket and the
// fastest bucket need not be the same one, and Ignored and Released requests
// feed neither.
func TestGuardEstimate(t *testing.T) {
	s := adaptive.NewManualSampler(0, 0)
	g := newTestGuard(t, s)
	ctx := context.Background()
	feed := func(at time.Duration, n int, rt time.Duration, o sluice.Outcome) {
		for range n {
			d, tk := admit(g, ctx, at)
			require.True(t, d.Allowed)
			g.Done(tk, o, at, rt)
		}
	}
	st := g.Stats()
	assert.Equal(t, int64(-1), st.MaxInflight, "unknown before any bucket completes")
	feed(0, 30, 50*ms, sluice.Success)      // busiest: 30 per bucket
	feed(100*ms, 5, 8*ms, sluice.Failure)   // fastest: 8 ms; failures count
	feed(200*ms, 50, 1*ms, sluice.Ignored)  // ignored: not a pass, not a latency
	feed(200*ms, 50, 1*ms, sluice.Released) // released: neither
	feed(300*ms, 1, 40*ms, sluice.Success)  // rolls the window
	st = g.Stats()
	assert.Equal(t, int64(30), st.MaxPass)
	assert.Equal(t, 8*ms, st.MinRT)
	assert.Equal(t, int64(30*8/100), st.MaxInflight) // 2.4 rounds to 2
	assert.Equal(t, (30*50+5*8)*ms/35, st.AvgRT)
	assert.Equal(t, int64(0), st.Inflight)
	assert.Equal(t, "normal", st.State)

	// A whole idle window later the estimate is unknown again.
	feed(3*time.Second, 1, 40*ms, sluice.Success)
	assert.Equal(t, int64(-1), g.Stats().MaxInflight)
}

func TestGuardSystemRules(t *testing.T) {
	ctx := context.Background()
	critical := sluice.WithPriority(ctx, sluice.PriorityCritical)

	t.Run("max inflight", func(t *testing.T) {
		g := newTestGuard(t, adaptive.NewManualSampler(0, 0), adaptive.WithMaxInflight(2), adaptive.WithCoolOff(0))
		for range 2 {
			d, _ := admit(g, ctx, 0)
			require.True(t, d.Allowed)
		}
		d, _ := admit(g, ctx, 0)
		require.ErrorIs(t, d.Cause, adaptive.ErrMaxInflight)
		assert.Equal(t, 100*ms, d.RetryAfter)
		// Critical requests: up to 1.5 × 2 = 3.
		d, _ = admit(g, critical, 0)
		require.True(t, d.Allowed)
		d, _ = admit(g, critical, 0)
		require.ErrorIs(t, d.Cause, adaptive.ErrMaxInflight)
	})

	t.Run("max qps", func(t *testing.T) {
		g := newTestGuard(t, adaptive.NewManualSampler(0, 0), adaptive.WithMaxQPS(5), adaptive.WithCoolOff(0))
		var tk sluice.Ticket
		for i := range 5 {
			var d sluice.Decision
			d, tk = admit(g, ctx, time.Duration(i)*150*ms)
			require.True(t, d.Allowed, "call %d", i)
			g.Done(tk, sluice.Success, time.Duration(i)*150*ms, ms)
		}
		d, _ := admit(g, ctx, 620*ms)
		require.ErrorIs(t, d.Cause, adaptive.ErrMaxQPS)
		assert.Equal(t, 80*ms, d.RetryAfter, "until the current bucket ends")
		// The first call (bucket 0) leaves the last second at 1000 ms.
		d, tk = admit(g, ctx, time.Second)
		require.True(t, d.Allowed, "%+v", d)
		g.Done(tk, sluice.Released, time.Second, 0)
		d, _ = admit(g, ctx, time.Second)
		require.True(t, d.Allowed, "a released admission is given back: %+v", d)
		d, _ = admit(g, ctx, time.Second)
		require.ErrorIs(t, d.Cause, adaptive.ErrMaxQPS)
	})

	t.Run("max avg rt", func(t *testing.T) {
		g := newTestGuard(t, adaptive.NewManualSampler(0, 0), adaptive.WithMaxAvgRT(50*ms), adaptive.WithCoolOff(0))
		for _, rt := range []time.Duration{40 * ms, 100 * ms} {
			d, tk := admit(g, ctx, 0)
			require.True(t, d.Allowed)
			g.Done(tk, sluice.Success, 0, rt)
		}
		// Bucket 0 completes with an average of 70 ms.
		d, _ := admit(g, ctx, 100*ms)
		require.ErrorIs(t, d.Cause, adaptive.ErrMaxAvgRT)
		d, tk := admit(g, critical, 100*ms)
		require.True(t, d.Allowed, "70 ms is within 1.5 × 50 ms for critical requests")
		g.Done(tk, sluice.Ignored, 100*ms, 0)
		// Once bucket 0 has left the last second, the average is empty.
		d, _ = admit(g, ctx, 1100*ms)
		require.True(t, d.Allowed, "%+v", d)
	})

	t.Run("max load1", func(t *testing.T) {
		s := adaptive.NewManualSampler(0, 5)
		g := newTestGuard(t, s, adaptive.WithMaxLoad1(4), adaptive.WithCoolOff(0))
		now := warm(t, g, 10, 10, 20*ms) // capacity 2
		for range 3 {
			d, _ := admit(g, ctx, now)
			require.True(t, d.Allowed, "load is checked against inflight: %+v", d)
		}
		d, _ := admit(g, ctx, now)
		require.ErrorIs(t, d.Cause, adaptive.ErrLoadOverload)
		d, _ = admit(g, critical, now)
		require.True(t, d.Allowed, "5 is within 1.5 × 4 for critical requests")
		s.SetLoad1(3)
		d, _ = admit(g, ctx, now)
		require.True(t, d.Allowed)
	})
}

func TestGuardCoolOffZeroAndThresholds(t *testing.T) {
	ctx := context.Background()
	s := adaptive.NewManualSampler(0.9, 0)
	g := newTestGuard(t, s, adaptive.WithCPUThreshold(0.95), adaptive.WithCoolOff(0))
	now := warm(t, g, 10, 10, 20*ms)
	for range 5 {
		d, _ := admit(g, ctx, now)
		require.True(t, d.Allowed, "0.9 is below the 0.95 threshold")
	}
	s.SetCPU(0.96)
	d, _ := admit(g, ctx, now)
	require.ErrorIs(t, d.Cause, adaptive.ErrCPUOverload)
	s.SetCPU(0.5)
	d, _ = admit(g, ctx, now+ms)
	require.True(t, d.Allowed, "no cool-off: CPU below threshold passes at once")
	assert.Equal(t, "normal", g.State())
}

func TestGuardOptionsValidation(t *testing.T) {
	s := adaptive.WithSampler(adaptive.NewManualSampler(0, 0))
	bad := [][]adaptive.Option{
		{s, adaptive.WithName("")},
		{adaptive.WithSampler(nil)},
		{s, adaptive.WithCPUThreshold(0)},
		{s, adaptive.WithCPUThreshold(1.5)},
		{s, adaptive.WithCritical(0.9, 0.5)},
		{s, adaptive.WithCritical(2, 1.5)},
		{s, adaptive.WithCoolOff(-1)},
		{s, adaptive.WithWindow(time.Second, 1)},
		{s, adaptive.WithWindow(time.Millisecond, 10)},
		{s, adaptive.WithMaxInflight(0)},
		{s, adaptive.WithMaxAvgRT(0)},
		{s, adaptive.WithMaxQPS(0.5)},
		{s, adaptive.WithMaxLoad1(-1)},
		{s, adaptive.WithAlgorithm(adaptive.AIMD{})},
		{s, adaptive.WithQueue(1, 0)},
	}
	for i, opts := range bad {
		_, err := adaptive.NewGuard(opts...)
		require.Error(t, err, "case %d", i)
	}
	g, err := adaptive.NewGuard(s, adaptive.WithName("api"), nil)
	require.NoError(t, err)
	assert.Equal(t, "api", g.Name())
	require.NoError(t, g.Close())
	require.NoError(t, g.Close())
}

// TestGuardStateChangesInOrder checks that concurrent sheds and recoveries
// reach a subscriber one at a time, alternating, outside the guard's locks
// (the subscriber calls back into the guard).
func TestGuardStateChangesInOrder(t *testing.T) {
	s := adaptive.NewManualSampler(0, 0)
	g := newTestGuard(t, s, adaptive.WithMaxInflight(1), adaptive.WithCoolOff(ms))
	var mu sync.Mutex
	var got []string
	g.Subscribe(func(c sluice.StateChange) {
		_ = g.State() // re-entry must not deadlock
		mu.Lock()
		got = append(got, c.To)
		mu.Unlock()
	})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				now := time.Duration(i*4+w) * ms / 2
				d, tk := admit(g, context.Background(), now)
				if d.Allowed {
					g.Done(tk, sluice.Success, now, ms)
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for i, to := range got {
		want := "shedding"
		if i%2 == 1 {
			want = "normal"
		}
		require.Equal(t, want, to, "change %d of %d", i, len(got))
	}
}

func TestGuardAllocs(t *testing.T) {
	g := newTestGuard(t, adaptive.NewManualSampler(0.9, 0), adaptive.WithMaxInflight(1000), adaptive.WithMaxQPS(1e9))
	warm(t, g, 10, 10, 20*ms)
	ctx := context.Background()
	now := time.Second
	allocs := testing.AllocsPerRun(1000, func() {
		now += 10 * time.Microsecond
		d, tk := admit(g, ctx, now)
		if d.Allowed {
			g.Done(tk, sluice.Success, now, ms)
		}
	})
	assert.Zero(t, allocs)
	// A rejection allocates nothing either.
	g2 := newTestGuard(t, adaptive.NewManualSampler(0, 0), adaptive.WithMaxInflight(1))
	g2.Admit(ctx, 0)
	allocs = testing.AllocsPerRun(1000, func() {
		if d, _ := admit(g2, ctx, 0); d.Allowed || !errors.Is(d.Cause, adaptive.ErrMaxInflight) {
			t.Fatal("want a rejection")
		}
	})
	assert.Zero(t, allocs)
}

// TestGuardInSluiceGuard runs the load guard in a sluice.Guard chain: the
// chain's observer hears its state changes, and its rejection reaches the
// caller as a sluice rejection with cause ErrOverloaded.
func TestGuardInSluiceGuard(t *testing.T) {
	s := adaptive.NewManualSampler(0, 0)
	lg := newTestGuard(t, s, adaptive.WithMaxInflight(1))
	var changes []string
	clk := sluice.NewManualClock(0)
	g, err := sluice.New(sluice.With(lg), sluice.WithClock(clk),
		sluice.OnStateChange(func(c sluice.StateChange) { changes = append(changes, c.From+"->"+c.To) }))
	require.NoError(t, err)
	defer g.Close()
	ctx := context.Background()
	held, err := g.Begin(ctx)
	require.NoError(t, err)
	err = g.Do(ctx, func(context.Context) error { return nil })
	require.ErrorIs(t, err, sluice.ErrRejected)
	require.ErrorIs(t, err, sluice.ErrOverloaded)
	require.ErrorIs(t, err, adaptive.ErrMaxInflight)
	assert.Equal(t, sluice.CauseOverloaded, sluice.CauseOf(err))
	require.NoError(t, held.End(nil))
	clk.Advance(2 * time.Second)
	require.NoError(t, g.Do(ctx, func(context.Context) error { return nil }))
	assert.Equal(t, []string{"normal->shedding", "shedding->normal"}, changes)
}

// A shed by a system rule is not a CPU shed: with CPU low it starts no
// cool-off, and the next request is judged by the rules alone.
func TestGuardRuleShedStartsNoCPUCoolOff(t *testing.T) {
	ctx := context.Background()
	g := newTestGuard(t, adaptive.NewManualSampler(0, 0), adaptive.WithMaxInflight(1)) // default cool-off, 1 s
	d, tk := admit(g, ctx, 0)
	require.True(t, d.Allowed)
	d, _ = admit(g, ctx, 0)
	require.ErrorIs(t, d.Cause, adaptive.ErrMaxInflight)
	g.Done(tk, sluice.Success, 10*ms, 10*ms)
	d, tk = admit(g, ctx, 150*ms)
	require.True(t, d.Allowed, "CPU is low and inflight is back under its maximum: %+v", d)
	g.Done(tk, sluice.Success, 160*ms, 10*ms)
}

// Requests arriving together count each other: a maximum in flight is
// never overshot.
func TestGuardMaxInflightUnderConcurrency(t *testing.T) {
	const limit, callers = 4, 64
	g := newTestGuard(t, adaptive.NewManualSampler(0, 0), adaptive.WithMaxInflight(limit), adaptive.WithCoolOff(0))
	var admitted, decided atomic.Int64
	var start, held sync.WaitGroup
	release := make(chan struct{})
	start.Add(1)
	for range callers {
		held.Add(1)
		go func() {
			defer held.Done()
			start.Wait()
			d, tk := admit(g, context.Background(), 0)
			if d.Allowed {
				admitted.Add(1)
			}
			decided.Add(1)
			if !d.Allowed {
				return
			}
			<-release
			g.Done(tk, sluice.Success, ms, ms)
		}()
	}
	start.Done()
	deadline := time.After(5 * time.Second)
	for decided.Load() < callers {
		select {
		case <-deadline:
			close(release)
			t.Fatalf("only %d of %d callers decided", decided.Load(), callers)
		default:
			runtime.Gosched()
		}
	}
	assert.Equal(t, int64(limit), admitted.Load(), "admitted while all %d were held", limit)
	close(release)
	held.Wait()
}

// A state listener that panics while a request is shed leaves the Guard
// whole: the shed request is not counted in flight, and later changes are
// still delivered.
func TestGuardSurvivesAPanickingListener(t *testing.T) {
	g, err := adaptive.NewGuard(adaptive.WithSampler(adaptive.NewManualSampler(0, 0)),
		adaptive.WithMaxInflight(1), adaptive.WithCoolOff(time.Millisecond))
	require.NoError(t, err)
	defer g.Close()
	first := true
	g.Subscribe(func(sluice.StateChange) {
		if first {
			first = false
			panic("listener bug")
		}
	})
	var got []string
	g.Subscribe(func(c sluice.StateChange) { got = append(got, c.To) })
	ctx := context.Background()
	_, tk := admit(g, ctx, 0)
	assert.Panics(t, func() { g.Admit(ctx, 0) }, "shed; a listener panics")
	g.Done(tk, sluice.Success, time.Millisecond, time.Millisecond)
	assert.Zero(t, g.Stats().Inflight)
	got = nil
	d, tk := admit(g, ctx, 10*time.Millisecond) // past the cool-off: back to normal
	require.True(t, d.Allowed)
	g.Done(tk, sluice.Success, 11*time.Millisecond, time.Millisecond)
	assert.Contains(t, got, adaptive.StateNormal, "the change after the panic is delivered")
}

// WithMaxQPS with a rate too high to count is no cap, not a cap of one.
func TestHugeMaxQPSIsNoCap(t *testing.T) {
	for _, qps := range []float64{1e19, math.MaxFloat64} {
		g, err := adaptive.NewGuard(adaptive.WithSampler(adaptive.NewManualSampler(0, 0)), adaptive.WithMaxQPS(qps))
		require.NoError(t, err)
		for i := range 3 {
			d, tk := admit(g, context.Background(), time.Duration(i)*time.Millisecond)
			require.True(t, d.Allowed, "qps %g, request %d: %v", qps, i+1, d.Cause)
			g.Done(tk, sluice.Success, time.Duration(i)*time.Millisecond, 0)
		}
		g.Close()
	}
}

// A nil sampler of a pointer type is refused like a nil interface, not
// called.
func TestNilSamplerPointerRefused(t *testing.T) {
	var s *adaptive.SystemSampler
	_, err := adaptive.NewGuard(adaptive.WithSampler(s))
	require.ErrorContains(t, err, "nil *adaptive.SystemSampler")
	var m *adaptive.ManualSampler
	_, err = adaptive.NewGuard(adaptive.WithSampler(m))
	require.Error(t, err)
}

// panickySampler is a Sampler whose CPU panics while told to.
type panickySampler struct{ panicking atomic.Bool }

func (s *panickySampler) CPU() float64 {
	if s.panicking.Load() {
		panic("sampler bug")
	}
	return 0
}

func (s *panickySampler) Load1() float64 { return 0 }

// A Sampler that panics while a request is admitted leaves no request in
// flight: the caller, who gets the panic, has no ticket to give back.
func TestGuardSurvivesAPanickingSampler(t *testing.T) {
	s := &panickySampler{}
	g, err := adaptive.NewGuard(adaptive.WithSampler(s))
	require.NoError(t, err)
	defer g.Close()
	s.panicking.Store(true)
	assert.PanicsWithValue(t, "sampler bug", func() { g.Admit(context.Background(), 0) })
	s.panicking.Store(false)
	assert.Zero(t, g.Stats().Inflight)
}
