package ratelimit

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/policytest"
)

func mustWarmUp(t testing.TB, r Rate, burst int64, warmUp time.Duration, coldFactor int64, opts ...Option) *WarmUp {
	t.Helper()
	w, err := NewWarmUp(r, burst, warmUp, coldFactor, opts...)
	require.NoError(t, err)
	return w
}

// With 10/s (T = 100ms), a warm-up of 2s and a cold factor of 3, the store
// holds 20 permits at most, its threshold is 10, a permit above it costs
// 20ms more per permit, and 100ms of idle time adds one permit.

func TestWarmUpSteps(t *testing.T) {
	const m = time.Millisecond
	w := mustWarmUp(t, PerSecond(10), 1, 2*time.Second, 3)
	runSteps(t, w, []step{
		// Cold: the first permit costs (300ms + 280ms)/2.
		{at: 0, allowed: true, remaining: 0, reset: 290 * m},
		{at: 0, allowed: false, remaining: 0, reset: 290 * m, retryAfter: 290 * m},
		{at: 290 * m, allowed: true, remaining: 0, reset: 270 * m},
		// Released at once: undone exactly, the store included.
		{at: 560 * m, allowed: true, remaining: 0, reset: 250 * m, release: true},
		{at: 560 * m, allowed: true, remaining: 0, reset: 250 * m},
		{at: 700 * m, allowed: false, remaining: 0, reset: 110 * m, retryAfter: 110 * m},
		// The clock jumps back: nothing extra.
		{at: 100 * m, allowed: false, remaining: 0, reset: 710 * m, retryAfter: 710 * m},
	})
	d := decideAt(w, time.Hour, 2)
	require.ErrorIs(t, d.Cause, ErrNeverSatisfiable)
	assert.Equal(t, int64(1), d.Limit)
	assert.Equal(t, "ratelimit/warm-up", d.Policy)
}

// admitSaturated admits count requests at the earliest instant each one is
// allowed, starting at start, and returns the gaps between them and the
// instant after the last one.
func admitSaturated(t *testing.T, w *WarmUp, start time.Duration, count int) ([]time.Duration, time.Duration) {
	t.Helper()
	now, gaps := start, make([]time.Duration, 0, count)
	last := now
	for i := range count {
		d := decideAt(w, now, 1)
		if !d.Allowed {
			require.Positive(t, d.RetryAfter)
			now += d.RetryAfter
			d = decideAt(w, now, 1)
			require.True(t, d.Allowed, "admitted at the instant RetryAfter named")
		}
		if i > 0 {
			gaps = append(gaps, now-last)
		}
		last = now
	}
	return gaps, now
}

func TestWarmUpRateClimbs(t *testing.T) {
	const m = time.Millisecond
	w := mustWarmUp(t, PerSecond(10), 1, 2*time.Second, 3)
	gaps, end := admitSaturated(t, w, 0, 31)
	// Ten permits above the threshold: 290ms, 270ms, … 110ms, two seconds in
	// all; then the stable 100ms.
	var warm time.Duration
	for i := range 10 {
		assert.Equal(t, time.Duration(290-20*i)*m, gaps[i], "gap %d", i)
		warm += gaps[i]
	}
	assert.Equal(t, 2*time.Second, warm, "the rate reaches the stable rate over the warm-up period")
	for i := 10; i < len(gaps); i++ {
		assert.Equal(t, 100*m, gaps[i], "gap %d", i)
	}

	// Warm now (the store is empty). One second idle refills half the
	// store: back at the threshold, the next permit costs the stable 100ms.
	gaps, end = admitSaturated(t, w, end+100*m+time.Second, 2)
	assert.Equal(t, 100*m, gaps[0])
	// Two more seconds idle: the store is full, cold again.
	gaps, _ = admitSaturated(t, w, end+100*m+2*time.Second, 3)
	assert.Equal(t, []time.Duration{290 * m, 270 * m}, gaps)
}

func TestWarmUpColdBurst(t *testing.T) {
	const m = time.Millisecond
	w := mustWarmUp(t, PerSecond(10), 10, 2*time.Second, 3)
	// Cold permits cost 290, 270, 250, 230ms: the TAT passes 900ms after 4.
	// Remaining counts what the cold costs leave, not burst - 1.
	for want := int64(3); want >= 0; want-- {
		d := decideAt(w, 0, 1)
		require.True(t, d.Allowed)
		assert.Equal(t, want, d.Remaining)
	}
	d := decideAt(w, 0, 1)
	require.False(t, d.Allowed)
	assert.Zero(t, d.Remaining)
	assert.Equal(t, 1040*m-900*m, d.RetryAfter)

	// Saturate until the store is empty, then come back exactly when the
	// bucket is full again, before any idle time cools it: a warm bucket
	// admits its whole burst at once.
	_, end := admitSaturated(t, w, 0, 30)
	d = decideAt(w, end, 1)
	require.False(t, d.Allowed)
	full := end + d.Reset
	assert.Equal(t, int64(10), decideAt(w, full, 1).Remaining+1, "warm: the whole burst")
	burst := 1
	for w.allowNAt(full, 1) {
		burst++
	}
	assert.Equal(t, 10, burst)
}

func TestWarmUpValidation(t *testing.T) {
	for _, tc := range []struct {
		name       string
		r          Rate
		burst      int64
		warmUp     time.Duration
		coldFactor int64
		opts       []Option
	}{
		{"zero warm-up", PerSecond(1), 1, 0, 3, nil},
		{"negative warm-up", PerSecond(1), 1, -time.Second, 3, nil},
		{"cold factor 1", PerSecond(1), 1, time.Second, 1, nil},
		{"cold factor 0", PerSecond(1), 1, time.Second, 0, nil},
		{"cold interval overflows", Rate{Count: 1, Period: time.Hour}, 1, time.Second, 1 << 50, nil},
		{"warm-up period overflows", PerSecond(1), 1, time.Duration(maxTolerance/2 + 1), 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := NewWarmUp(tc.r, tc.burst, tc.warmUp, tc.coldFactor, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, w)
		})
	}
	clk := sluice.NewManualClock(0)
	w := mustWarmUp(t, PerSecond(10), 2, time.Second, 3, WithName("ratelimit/cold"))
	assert.Equal(t, "ratelimit/cold", w.Name())
	assert.True(t, w.allowNAt(clk.Now(), 1))
	assert.False(t, w.allowNAt(clk.Now(), 2))
	clk.Advance(time.Second)
	assert.True(t, w.allowNAt(clk.Now(), 2))
	s := mustWarmUp(t, Rate{Count: 1, Period: time.Hour}, 1, time.Second, 3)
	assert.True(t, s.allowNAt(monoclock.Now(), 1))
	assert.False(t, s.allowNAt(monoclock.Now(), 1))
}

// TestWarmUpReleaseOfAnEarlierAdmission pins that releasing an admission
// that is not the latest gives back its stable cost, no more.
func TestWarmUpReleaseOfAnEarlierAdmission(t *testing.T) {
	const m = time.Millisecond
	w := mustWarmUp(t, PerSecond(10), 5, 2*time.Second, 3)
	ctx := context.Background()
	_, first := admit(w, ctx, 0) // costs 290ms
	d, second := admit(w, ctx, 0)
	require.True(t, d.Allowed) // costs 270ms
	assert.Equal(t, 560*m, d.Reset)
	w.Done(first, sluice.Released, 0, 0) // not the latest: its stable 100ms
	assert.Equal(t, 460*m, decideAt(w, 0, 3).Reset)
	// The latest, but the state has moved since it was admitted: its stable
	// 100ms too.
	w.Done(second, sluice.Released, 0, 0)
	d = decideAt(w, 0, 2)
	require.False(t, d.Allowed)
	assert.Equal(t, 360*m, d.Reset)
	// Success and Failure give nothing back.
	w.Done(first, sluice.Success, 0, 0)
	w.Done(first, sluice.Failure, 0, 0)
	assert.Equal(t, 360*m, decideAt(w, 0, 2).Reset)
}

// TestWarmUpReleaseOfALargeEarlierAdmission pins that an earlier admission
// gives back its stable cost whatever its cost, up to the burst: here a
// byte rate of 100 MB/s, 10ns a byte, and bodies of many MB.
func TestWarmUpReleaseOfALargeEarlierAdmission(t *testing.T) {
	const burst = 100_000_000 // bytes: a burst of 1s
	ctx := context.Background()
	for _, n := range []int64{16_000_000, 20_000_000, burst} {
		w := mustWarmUp(t, PerSecond(burst), burst, time.Second, 3)
		d, tk := admit(w, sluice.WithCost(ctx, n), 0)
		require.True(t, d.Allowed)
		require.True(t, w.allowNAt(d.Reset, 1), "a later admission: the first is not the latest any more")
		busy := decideAt(w, 0, burst+1).Reset // the time until TAT; takes nothing
		w.Done(tk, sluice.Released, 0, 0)
		assert.Equal(t, time.Duration(n)*10, busy-decideAt(w, 0, burst+1).Reset, "cost %d", n)
	}
	t.Run("a cost its ticket cannot carry", func(t *testing.T) {
		// A burst of 2^32 or more leaves 32 bits of the ticket to the cost: an
		// earlier admission of 2^32 or more gives nothing back, as Done says.
		const burst = 1 << 33 // at 1ns each
		for _, n := range []int64{1<<32 - 1, 1 << 32} {
			w := mustWarmUp(t, PerSecond(1_000_000_000), burst, time.Second, 3)
			d, tk := admit(w, sluice.WithCost(ctx, n), 0)
			require.True(t, d.Allowed)
			require.True(t, w.allowNAt(0, 1))
			busy := decideAt(w, 0, burst+1).Reset
			w.Done(tk, sluice.Released, 0, 0)
			want := time.Duration(n)
			if n >= 1<<32 {
				want = 0
			}
			assert.Equal(t, want, busy-decideAt(w, 0, burst+1).Reset, "cost %d", n)
			// The latest admission is undone exactly all the same.
			w = mustWarmUp(t, PerSecond(1_000_000_000), burst, time.Second, 3)
			d, tk = admit(w, sluice.WithCost(ctx, n), 0)
			require.True(t, d.Allowed)
			w.Done(tk, sluice.Released, 0, 0)
			assert.Zero(t, decideAt(w, 0, burst+1).Reset, "cost %d", n)
		}
	})
}

func TestWarmUpConformance(t *testing.T) {
	policytest.Run(t, policytest.Config{
		New: func(t *testing.T) sluice.Policy {
			return mustWarmUp(t, PerSecond(1000), 10, 100*time.Millisecond, 3)
		},
		Causes: []error{sluice.ErrRateLimited},
	})
}

func TestWarmUpConcurrentNeverOver(t *testing.T) {
	w := mustWarmUp(t, PerSecond(1000), 20, 50*time.Millisecond, 3)
	n := bucketHammer(t, 20, time.Millisecond, 10*time.Microsecond, func(now time.Duration) bool { return w.allowNAt(now, 1) })
	t.Logf("admitted %d", n)
}

func TestWarmUpAllocatesNothing(t *testing.T) {
	w := mustWarmUp(t, PerSecond(1_000_000), 1000, time.Second, 3)
	ctx := context.Background()
	var now time.Duration
	allocs := testing.AllocsPerRun(1000, func() {
		now += time.Microsecond
		w.allowNAt(now, 1)
		d, tk := admit(w, ctx, now)
		if d.Allowed {
			w.Done(tk, sluice.Released, now, 0)
		}
		_ = decideAt(w, now, 5000)
	})
	assert.Zero(t, allocs)
}

// TestWarmUpRemainingMatchesCounting checks the closed form of Remaining
// against counting the requests one by one, over cold and warm stores.
func TestWarmUpRemainingMatchesCounting(t *testing.T) {
	w := mustWarmUp(t, PerSecond(10), 50, 2*time.Second, 4)
	count := func(stored float64, budget int64) int64 {
		if budget < 0 {
			return 0
		}
		k := int64(0)
		for w.cost(stored, min(float64(k+1), stored), k+1) <= budget {
			k++
		}
		return k + 1
	}
	for stored := 0.0; stored <= w.maxStored; stored += w.maxStored / 37 {
		for budget := int64(-1); budget < w.tau; budget += w.tau/53 + 1 {
			require.Equal(t, count(stored, budget), w.remaining(stored, budget), "stored %v budget %v", stored, budget)
		}
	}
}

// The Remaining of an admission is how many unit requests the limiter
// admits one after another at the same instant, cold or warm, over many
// rates, bursts and warm-up periods, at instants from a fraction of a
// microsecond apart to several.
func TestWarmUpRemainingMatchesAdmissionsAtOneInstant(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	checked := 0
	for range 400 {
		r := Rate{Count: int64(1 + rng.IntN(1000)), Period: time.Duration(1+rng.IntN(5000)) * time.Microsecond}
		w, err := NewWarmUp(r, int64(1+rng.IntN(50)), time.Duration(1+rng.IntN(100))*time.Millisecond, int64(2+rng.IntN(5)))
		require.NoError(t, err)
		now := time.Duration(rng.IntN(1e9))
		for range 50 {
			now += time.Duration(rng.IntN(3000))
			d := decideAt(w, now, 1)
			if !d.Allowed {
				continue
			}
			// Count, then put the state back for the next step.
			tat, stored, gen, last := w.tat, w.stored, w.gen, w.last
			n := int64(0)
			for n <= d.Remaining && w.allowNAt(now, 1) {
				n++
			}
			w.tat, w.stored, w.gen, w.last = tat, stored, gen, last
			require.Equal(t, d.Remaining, n, "rate %v, burst %d, at %v", r, w.burst, now)
			checked++
		}
	}
	require.Greater(t, checked, 1000)
}

// warmUpWarmedAt returns a WarmUp (10/s, burst 1, warm-up 1s, cold factor 3)
// driven at its full rate until warm, and the instant it is full again.
func warmUpWarmedAt(t *testing.T) (*WarmUp, time.Duration) {
	t.Helper()
	w, err := NewWarmUp(PerSecond(10), 1, time.Second, 3)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Duration(0)
	for range 200 { // 20 s of full load: far past the warm-up period
		d, _ := w.admitD(ctx, now)
		if d.Allowed {
			now += d.Reset
		} else {
			now += d.RetryAfter
		}
	}
	return w, now
}

// A limiter idle for twice its warm-up period is fully cold (its next
// permit costs about C×T); a SetLimit that only lengthens the warm-up
// period leaves it so: the idle time before the change is not counted at
// the new, slower cooling, which would send the full rate to a cold
// service at once.
func TestWarmUpSetLimitKeepsColdShareAfterIdle(t *testing.T) {
	ctx := context.Background()

	// Reference: no SetLimit, idle 2 s, the first permit costs ~C×T.
	ref, at := warmUpWarmedAt(t)
	d, _ := ref.admitD(ctx, at+2*time.Second)
	if !d.Allowed || d.Reset < 250*time.Millisecond {
		t.Fatalf("reference limiter not cold after idling twice its warm-up: %+v", d)
	}

	w, at := warmUpWarmedAt(t)
	// Idle 2 s (fully cold by the old numbers), then lengthen the warm-up.
	if err := w.SetLimit(PerSecond(10), 1, 100*time.Second, 3); err != nil {
		t.Fatal(err)
	}
	d, _ = w.admitD(ctx, at+2*time.Second)
	if !d.Allowed {
		t.Fatalf("first request rejected: %+v", d)
	}
	// Fully cold under the new numbers too: the permit costs ~C×T = 300ms.
	if d.Reset < 250*time.Millisecond {
		t.Fatalf("after idling fully cold and a SetLimit of the warm-up period, the first permit cost %v (warm: T=100ms); want ~300ms (still fully cold)", d.Reset)
	}
}

// A Released admission (the call never reached the backend) after a
// SetLimit of the warm-up period is undone exactly, how the idle time
// before it cools the limiter included: the next permit still costs ~C×T,
// as it would had the released one never come.
func TestWarmUpReleasedAdmissionAfterSetLimitKeepsItCold(t *testing.T) {
	ctx := context.Background()
	w, at := warmUpWarmedAt(t)
	if err := w.SetLimit(PerSecond(10), 1, 100*time.Second, 3); err != nil {
		t.Fatal(err)
	}
	now := at + 2*time.Second // idle twice the old period: fully cold
	tk, q, err := w.Admit(ctx, now)
	if err != nil {
		t.Fatalf("first request rejected: %v", err)
	}
	if q.Reset < 250*time.Millisecond {
		t.Fatalf("the fix itself does not hold here: first permit cost %v", q.Reset)
	}
	w.Done(tk, sluice.Released, now, 0) // undone exactly
	d, _ := w.admitD(ctx, now)
	if !d.Allowed {
		t.Fatalf("the request after the release was rejected: %+v", d)
	}
	if d.Reset < 250*time.Millisecond {
		t.Errorf("after a released admission the same permit cost %v (warm: T=100ms); want ~300ms, as before the release", d.Reset)
	}
}
