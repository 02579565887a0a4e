package breaker_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
)

func TestOpenRejectsUntilProbeThenProbesDecide(t *testing.T) {
	t.Run("one probe closes", func(t *testing.T) {
		b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec))
		runSteps(t, b, []step{
			{at: 0, o: F, want: breaker.StateOpen},
			{at: 500 * ms, reject: true, want: breaker.StateOpen},
			{at: sec - 1, reject: true, want: breaker.StateOpen},
			{at: sec, o: S, want: breaker.StateClosed},
			{at: sec + ms, o: S, want: breaker.StateClosed},
		})
	})
	t.Run("a failed probe reopens", func(t *testing.T) {
		b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec))
		runSteps(t, b, []step{
			{at: 0, o: F, want: breaker.StateOpen},
			{at: sec, o: F, want: breaker.StateOpen},
			{at: 2*sec - 1, reject: true, want: breaker.StateOpen},
			{at: 2 * sec, o: S, want: breaker.StateClosed},
		})
	})
	t.Run("retry after counts down to the probe", func(t *testing.T) {
		b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec))
		_, tk := admit(b, context.Background(), 0)
		b.Done(tk, F, 0, 0)
		d, _ := admit(b, context.Background(), 300*ms)
		assert.Equal(t, 700*ms, d.RetryAfter)
		assert.Equal(t, int64(-1), d.Limit)
		assert.Equal(t, "breaker/test", d.Policy)
		_, err := mustAllowAt(b, 300*ms)
		assert.Equal(t, 700*ms, rejection(t, err).RetryAfter)
		assert.ErrorIs(t, err, sluice.ErrCircuitOpen)
	})
}

// mustAllowAt admits a call at instant now, and returns its Decision and,
// for a rejection, the rejection's error.
func mustAllowAt(b *breaker.Breaker, now time.Duration) (sluice.Decision, error) {
	d, _ := admit(b, context.Background(), now)
	if !d.Allowed {
		return d, sluice.Rejection(d)
	}
	return d, nil
}

func TestHalfOpenProbeRatio(t *testing.T) {
	tests := []struct {
		name     string
		probes   int
		ratio    float64
		outcomes []sluice.Outcome
		want     breaker.State
	}{
		{"3 of 3 succeed", 3, 1, []sluice.Outcome{S, S, S}, breaker.StateClosed},
		{"ratio 1: first failure reopens", 3, 1, []sluice.Outcome{S, F}, breaker.StateOpen},
		{"2/3: one failure tolerated", 3, 2.0 / 3, []sluice.Outcome{F, S, S}, breaker.StateClosed},
		{"2/3: two failures reopen", 3, 2.0 / 3, []sluice.Outcome{S, F, F}, breaker.StateOpen},
		{"0.5 of 4: two successes close", 4, 0.5, []sluice.Outcome{F, S, F, S}, breaker.StateClosed},
		{"0.5 of 4: three failures reopen", 4, 0.5, []sluice.Outcome{F, F, S, F}, breaker.StateOpen},
		{"released and ignored probes give their slot back", 2, 1, []sluice.Outcome{R, I, R, S, S}, breaker.StateClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec),
				breaker.WithHalfOpenProbes(tt.probes, tt.ratio))
			ctx := context.Background()
			_, tk := admit(b, ctx, 0)
			b.Done(tk, F, 0, 0)
			now := sec
			for i, o := range tt.outcomes {
				require.NotEqual(t, breaker.StateClosed, b.State(), "outcome %d", i)
				d, tk := admit(b, ctx, now)
				require.True(t, d.Allowed, "probe %d", i)
				b.Done(tk, o, now, 0)
			}
			assert.Equal(t, tt.want, b.State())
		})
	}
}

func TestHalfOpenAdmitsExactlyItsProbesUnderConcurrency(t *testing.T) {
	for _, probes := range []int{1, 3, 10} {
		t.Run(fmt.Sprint(probes), func(t *testing.T) {
			b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec),
				breaker.WithHalfOpenProbes(probes, 1))
			ctx := context.Background()
			_, tk := admit(b, ctx, 0)
			b.Done(tk, F, 0, 0)
			var admitted, rejected atomic.Int64
			var start, wg sync.WaitGroup
			start.Add(1)
			tickets := make(chan sluice.Ticket, 64)
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start.Wait()
					d, tk := admit(b, ctx, sec)
					if d.Allowed {
						admitted.Add(1)
						tickets <- tk
					} else {
						rejected.Add(1)
					}
				}()
			}
			start.Done()
			wg.Wait()
			close(tickets)
			assert.Equal(t, int64(probes), admitted.Load())
			assert.Equal(t, int64(64-probes), rejected.Load())
			assert.Equal(t, breaker.StateHalfOpen, b.State())
			c := b.Counts()
			assert.Equal(t, int64(probes), c.ProbesAdmitted)
			for tk := range tickets {
				b.Done(tk, S, sec, 0)
			}
			assert.Equal(t, breaker.StateClosed, b.State())
		})
	}
}

func TestBackoffGrowsAndCaps(t *testing.T) {
	b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithBackoff(sec, 5*sec))
	ctx := context.Background()
	_, tk := admit(b, ctx, 0)
	b.Done(tk, F, 0, 0)
	now := time.Duration(0)
	for i, want := range []time.Duration{sec, 2 * sec, 4 * sec, 5 * sec, 5 * sec} {
		d, _ := admit(b, ctx, now)
		require.False(t, d.Allowed, "open %d", i)
		require.Equal(t, want, d.RetryAfter, "open %d", i)
		now += want
		d, tk := admit(b, ctx, now) // the probe
		require.True(t, d.Allowed)
		b.Done(tk, F, now, 0)
	}
	// A successful probe closes; the next trip starts at the base again.
	d, _ := admit(b, ctx, now)
	require.Equal(t, 5*sec, d.RetryAfter)
	now += 5 * sec
	_, tk = admit(b, ctx, now)
	b.Done(tk, S, now, 0)
	require.Equal(t, breaker.StateClosed, b.State())
	_, tk = admit(b, ctx, now)
	b.Done(tk, F, now, 0)
	d, _ = admit(b, ctx, now)
	assert.Equal(t, sec, d.RetryAfter)
}

func TestStaleOutcomesAreDropped(t *testing.T) {
	t.Run("closed ticket after a reset", func(t *testing.T) {
		b := mustNew(t, breaker.WithConsecutiveFailures(1))
		ctx := context.Background()
		_, old := admit(b, ctx, 0)
		b.ForceOpen()
		b.Reset()
		b.Done(old, F, ms, ms)
		assert.Equal(t, breaker.StateClosed, b.State())
		assert.Zero(t, b.Counts().Requests)
	})
	t.Run("call admitted before the trip ends after it", func(t *testing.T) {
		b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec))
		ctx := context.Background()
		_, slow := admit(b, ctx, 0)
		_, tk := admit(b, ctx, 0)
		b.Done(tk, F, 0, 0) // trips
		_, probe := admit(b, ctx, sec)
		require.Equal(t, breaker.StateHalfOpen, b.State())
		b.Done(slow, S, sec, sec) // from the closed generation: no effect on the probe
		assert.Equal(t, breaker.StateHalfOpen, b.State())
		b.Done(probe, S, sec, 0)
		assert.Equal(t, breaker.StateClosed, b.State())
	})
	t.Run("probe of an earlier half-open phase", func(t *testing.T) {
		b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec), breaker.WithHalfOpenProbes(2, 1))
		ctx := context.Background()
		_, tk := admit(b, ctx, 0)
		b.Done(tk, F, 0, 0)
		_, p1 := admit(b, ctx, sec)
		_, p2 := admit(b, ctx, sec)
		b.Done(p1, F, sec, 0) // reopens
		_, q1 := admit(b, ctx, 3*sec)
		_, q2 := admit(b, ctx, 3*sec)
		b.Done(p2, R, 3*sec, 0) // stale: must not free a slot of the new phase
		d, _ := admit(b, ctx, 3*sec)
		assert.False(t, d.Allowed)
		b.Done(q1, S, 3*sec, 0)
		b.Done(q2, S, 3*sec, 0)
		assert.Equal(t, breaker.StateClosed, b.State())
	})
}

func TestForceOpenForceCloseReset(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := mustNew(t, breaker.WithClock(clk), breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec))
	ctx := context.Background()

	b.ForceOpen()
	assert.Equal(t, breaker.StateOpen, b.State())
	d, _ := admit(b, ctx, time.Hour) // held open: no probe however late
	assert.False(t, d.Allowed)
	assert.Equal(t, sec, d.RetryAfter)

	b.ForceClose()
	assert.Equal(t, breaker.StateClosed, b.State())
	for range 10 {
		_, tk := admit(b, ctx, 0)
		b.Done(tk, F, 0, 0)
	}
	assert.Equal(t, breaker.StateClosed, b.State(), "held closed: failures never trip")
	assert.Equal(t, int64(10), b.Counts().Failures)
	b.OpenFor(ctx, 0, time.Minute)
	assert.Equal(t, breaker.StateClosed, b.State(), "OpenFor yields to ForceClose")

	b.Reset()
	assert.Zero(t, b.Counts())
	_, tk := admit(b, ctx, 0)
	b.Done(tk, F, 0, 0)
	assert.Equal(t, breaker.StateOpen, b.State(), "Reset lifts the hold")
}

func TestOpenFor(t *testing.T) {
	b := mustNew(t, breaker.WithOpenDuration(sec))
	ctx := context.Background()
	b.OpenFor(ctx, 10*sec, 30*sec)
	d, _ := admit(b, ctx, 10*sec)
	assert.False(t, d.Allowed)
	assert.Equal(t, 30*sec, d.RetryAfter)
	b.OpenFor(ctx, 20*sec, 5*sec) // ends sooner than the current period: no change
	d, _ = admit(b, ctx, 20*sec)
	assert.Equal(t, 20*sec, d.RetryAfter)
	b.OpenFor(ctx, 20*sec, time.Minute) // extends
	d, _ = admit(b, ctx, 20*sec)
	assert.Equal(t, time.Minute, d.RetryAfter)
	b.OpenFor(ctx, 20*sec, 0)
	d, tk := admit(b, ctx, 80*sec)
	require.True(t, d.Allowed, "a probe after the period")
	b.Done(tk, S, 80*sec, 0)
	assert.Equal(t, breaker.StateClosed, b.State())
}

func TestListenersSeeEveryTransitionOnceInOrderAndMayCallBack(t *testing.T) {
	type tr struct{ from, to string }
	var got []tr
	b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec))
	b.Subscribe(func(c sluice.StateChange) {
		assert.Equal(t, "breaker/test", c.Policy)
		got = append(got, tr{c.From, c.To})
		// Calling back in must not deadlock.
		_ = b.State()
		_ = b.Counts()
		if c.To == breaker.StateHalfOpen.String() {
			b.ForceClose() // a change caused by a listener comes after it
		}
	})
	var changes []sluice.StateChange
	unsub := b.Subscribe(func(c sluice.StateChange) { changes = append(changes, c) })
	ctx := context.Background()
	_, tk := admit(b, ctx, 0)
	b.Done(tk, F, 0, 0)
	d, _ := admit(b, ctx, sec) // open → half-open, whose listener closes it
	assert.True(t, d.Allowed)
	assert.Equal(t, []tr{{"closed", "open"}, {"open", "half-open"}, {"half-open", "closed"}}, got)
	require.Len(t, changes, 3)
	assert.Equal(t, sluice.StateChange{Policy: "breaker/test", From: "closed", To: "open", At: 0}, changes[0])
	assert.Equal(t, "half-open", changes[1].To)
	assert.Equal(t, sec, changes[1].At)
	unsub()
	unsub()
	b.ForceOpen()
	assert.Len(t, changes, 3, "unsubscribed")
	assert.Len(t, got, 4)
}

// changeLog records the state changes a source's listeners hear, from any
// goroutine.
type changeLog struct {
	mu   sync.Mutex
	list []sluice.StateChange
}

// hear subscribes a changeLog to src.
func hear(src sluice.StateSource) *changeLog {
	l := &changeLog{}
	src.Subscribe(func(c sluice.StateChange) {
		l.mu.Lock()
		l.list = append(l.list, c)
		l.mu.Unlock()
	})
	return l
}

// all returns the changes heard so far.
func (l *changeLog) all() []sluice.StateChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.list)
}

func TestListenersOrderUnderConcurrentTransitions(t *testing.T) {
	b := mustNew(t)
	log := hear(b)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				switch (g + i) % 3 {
				case 0:
					b.ForceOpen()
				case 1:
					b.ForceClose()
				default:
					b.Reset()
				}
			}
		}()
	}
	wg.Wait()
	seen := log.all()
	require.NotEmpty(t, seen)
	require.Equal(t, "closed", seen[0].From)
	for i := 1; i < len(seen); i++ {
		require.Equal(t, seen[i-1].To, seen[i].From, "change %d does not follow change %d", i, i-1)
		require.NotEqual(t, seen[i].From, seen[i].To)
	}
	assert.Equal(t, b.State().String(), seen[len(seen)-1].To)
}

func TestListenerPanicDoesNotStopLaterDeliveries(t *testing.T) {
	var n int
	b := mustNew(t)
	b.Subscribe(func(sluice.StateChange) {
		n++
		if n == 1 {
			panic("listener failed")
		}
	})
	assert.Panics(t, b.ForceOpen)
	b.ForceClose()
	assert.Equal(t, 2, n)
}

// A random source that answers outside [0, 1), NaN included, shortens an
// open duration by no more than the jitter allows.
func TestJitterWithAStrayRandomSource(t *testing.T) {
	for _, r := range []float64{math.NaN(), -1, 2, math.Inf(1)} {
		b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec), breaker.WithJitter(0.5),
			breaker.WithRandom(func() float64 { return r }))
		_, tk := admit(b, context.Background(), 0)
		b.Done(tk, F, 0, 0)
		d, _ := admit(b, context.Background(), 0)
		assert.False(t, d.Allowed, "random %v", r)
		assert.True(t, d.RetryAfter >= sec/2 && d.RetryAfter <= sec, "random %v: open for %v", r, d.RetryAfter)
	}
}

func TestJitterShortensOpenDurations(t *testing.T) {
	draws := []float64{0.5, 0, 0.999999}
	var calls int
	b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithBackoff(sec, 4*sec), breaker.WithJitter(0.5),
		breaker.WithRandom(func() float64 { d := draws[calls%len(draws)]; calls++; return d }))
	ctx := context.Background()
	_, tk := admit(b, ctx, 0)
	b.Done(tk, F, 0, 0)
	now := time.Duration(0)
	// 1s less 0.5·0.5 of it, 2s less nothing, 4s less almost half.
	for i, want := range []time.Duration{750 * ms, 2 * sec, 2*sec + 2*time.Microsecond} {
		d, _ := admit(b, ctx, now)
		require.False(t, d.Allowed, "open %d", i)
		require.InDelta(t, float64(want), float64(d.RetryAfter), float64(5*time.Microsecond), "open %d", i)
		now += d.RetryAfter
		d, tk := admit(b, ctx, now)
		require.True(t, d.Allowed, "probe %d", i)
		b.Done(tk, F, now, 0)
	}
	assert.Equal(t, 4, calls, "one draw per opening: the trip and three failed probes")

	plain := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec))
	_, tk = admit(plain, ctx, 0)
	plain.Done(tk, F, 0, 0)
	d, _ := admit(plain, ctx, 0)
	assert.Equal(t, sec, d.RetryAfter, "no jitter: the open duration as it is")

	for _, bad := range []float64{-0.1, 1, nanF()} {
		_, err := breaker.New("x", breaker.WithJitter(bad))
		assert.Error(t, err, "%v", bad)
	}
}

// A backoff capped near the largest duration keeps doubling up to its cap
// however many times the breaker reopens: the doubling never overflows into
// a nanosecond's opening.
func TestBackoffNearTheLargestDurationDoesNotOverflow(t *testing.T) {
	base := time.Duration(1) << 60
	b := mustNew(t, breaker.WithConsecutiveFailures(1), breaker.WithBackoff(base, math.MaxInt64))
	ctx := context.Background()
	now := time.Duration(0)
	_, tk := admit(b, ctx, now)
	b.Done(tk, F, now, 0)
	for i, want := range []time.Duration{base, 2 * base, 4 * base} {
		d, _ := admit(b, ctx, now)
		require.False(t, d.Allowed, "open %d", i)
		require.Equal(t, want, d.RetryAfter, "open %d", i)
		now += d.RetryAfter
		d, tk := admit(b, ctx, now)
		require.True(t, d.Allowed, "probe %d", i)
		b.Done(tk, F, now, 0)
	}
	d, _ := admit(b, ctx, now)
	require.False(t, d.Allowed)
	assert.Equal(t, time.Duration(math.MaxInt64)-now, d.RetryAfter, "open until the end of time, not for 1ns")
}
