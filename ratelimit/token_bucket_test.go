package ratelimit

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/policytest"
)

func mustTokenBucket(t testing.TB, r Rate, burst int64, opts ...Option) *TokenBucket {
	t.Helper()
	tb, err := NewTokenBucket(r, burst, opts...)
	require.NoError(t, err)
	return tb
}

func TestTokenBucketSteps(t *testing.T) {
	const m = time.Millisecond
	// 10/s: a token every 100ms; 3 tokens at most.
	tb := mustTokenBucket(t, PerSecond(10), 3)
	runSteps(t, tb, []step{
		{at: 0, allowed: true, remaining: 2, reset: 100 * m},
		{at: 0, n: 2, allowed: true, remaining: 0, reset: 300 * m},
		{at: 0, allowed: false, remaining: 0, reset: 300 * m, retryAfter: 100 * m},
		{at: 150 * m, allowed: true, remaining: 0, reset: 250 * m},
		{at: 150 * m, allowed: false, remaining: 0, reset: 250 * m, retryAfter: 50 * m},
		{at: 300 * m, n: 2, allowed: true, remaining: 0, reset: 300 * m},
		{at: 300 * m, allowed: false, remaining: 0, reset: 300 * m, retryAfter: 100 * m},
		// Released at once gives the token back.
		{at: 400 * m, allowed: true, remaining: 0, reset: 300 * m, release: true},
		{at: 400 * m, allowed: true, remaining: 0, reset: 300 * m},
		{at: 400 * m, n: 4, allowed: false, remaining: 0, reset: 300 * m, retryAfter: 0},
		{at: 2 * time.Second, n: 3, allowed: true, remaining: 0, reset: 300 * m},
		// The clock jumps back: nothing extra.
		{at: time.Second, allowed: false, remaining: 0, reset: 1300 * m, retryAfter: 1100 * m},
		{at: 2100 * m, allowed: true, remaining: 0, reset: 300 * m},
	})
	d := decideAt(tb, 0, 4)
	require.ErrorIs(t, d.Cause, ErrNeverSatisfiable)
	assert.Equal(t, int64(3), d.Limit)
	assert.Equal(t, "ratelimit/token-bucket", d.Policy)
}

func TestTokenBucketClock(t *testing.T) {
	clk := sluice.NewManualClock(0)
	tb := mustTokenBucket(t, PerSecond(2), 2, WithClock(clk), WithName("ratelimit/api"))
	assert.Equal(t, "ratelimit/api", tb.Name())
	assert.True(t, tb.AllowN(2))
	assert.False(t, tb.Allow())
	clk.Advance(500 * time.Millisecond)
	assert.True(t, tb.Allow())
	assert.False(t, tb.AllowN(3))
	assert.InDelta(t, 0, tb.Tokens(), 1e-9)
	assert.Equal(t, PerSecond(2), tb.Rate())
	assert.Equal(t, int64(2), tb.Burst())
	// The system clock works without an injected one.
	s := mustTokenBucket(t, Rate{Count: 1, Period: time.Hour}, 1)
	assert.True(t, s.Allow())
	assert.False(t, s.Allow())
}

func TestTokenBucketReserve(t *testing.T) {
	const m = time.Millisecond
	tb := mustTokenBucket(t, PerSecond(10), 2)
	r1 := tb.reserveNAt(0, 2)
	require.True(t, r1.ok)
	assert.Zero(t, r1.delayFrom(0))
	r2 := tb.reserveNAt(0, 1)
	require.True(t, r2.ok)
	assert.Equal(t, 100*m, r2.delayFrom(0))
	assert.Equal(t, 60*m, r2.delayFrom(40*m))
	assert.InDelta(t, -1, tb.TokensAt(0), 1e-9)
	big := tb.reserveNAt(0, 3)
	assert.False(t, big.ok)
	assert.Equal(t, time.Duration(math.MaxInt64), big.delayFrom(0))
	big.cancelAt(0) // a reservation that was not granted gives nothing back

	// Cancelling the last reservation gives its token back.
	r2.cancelAt(0)
	assert.InDelta(t, 0, tb.TokensAt(0), 1e-9)
	r2.cancelAt(0) // twice: nothing more
	assert.InDelta(t, 0, tb.TokensAt(0), 1e-9)
	assert.True(t, tb.AllowAt(100*m))
}

func TestTokenBucketCancelOwesOnlyWhatIsLeft(t *testing.T) {
	const m = time.Millisecond
	t.Run("partly refilled", func(t *testing.T) {
		tb := mustTokenBucket(t, PerSecond(10), 2)
		require.True(t, tb.AllowNAt(0, 2))
		r := tb.reserveNAt(0, 1) // its token comes at 100ms; the bucket is whole at 300ms
		// Cancelled at 250ms: without r the bucket would be whole since 200ms.
		r.cancelAt(250 * m)
		assert.InDelta(t, 2, tb.TokensAt(250*m), 1e-9)
	})
	t.Run("after the bucket refilled", func(t *testing.T) {
		tb := mustTokenBucket(t, PerSecond(10), 2)
		r := tb.reserveNAt(0, 1)
		require.True(t, tb.AllowAt(0))
		r.cancelAt(time.Second)
		assert.False(t, tb.AllowNAt(0, 2))
		assert.True(t, tb.AllowAt(0+100*m))
	})
	t.Run("later reservations count on it", func(t *testing.T) {
		tb := mustTokenBucket(t, PerSecond(1), 1)
		require.True(t, tb.AllowAt(0))
		a := tb.reserveNAt(0, 1) // at 1s
		b := tb.reserveNAt(0, 1) // at 2s
		assert.Equal(t, 2*time.Second, b.delayFrom(0))
		a.cancelAt(0)
		// b keeps its turn at 2s; nobody else may take a turn at 2s.
		c := tb.reserveNAt(0, 1)
		assert.Equal(t, 3*time.Second, c.delayFrom(0))
	})
	t.Run("after a reconfiguration", func(t *testing.T) {
		tb := mustTokenBucket(t, PerSecond(1), 1)
		require.True(t, tb.AllowAt(0))
		a := tb.reserveNAt(0, 1)
		require.NoError(t, tb.setBurstAt(0, 2)) // still 2 short of full
		a.cancelAt(0)
		assert.InDelta(t, 0, tb.TokensAt(0), 1e-9)
	})
}

// TestTokenBucketReleaseKeepsWaitingTurns pins that a released admission does
// not hand a turn that a waiting reservation was promised to a newcomer.
func TestTokenBucketReleaseKeepsWaitingTurns(t *testing.T) {
	tb := mustTokenBucket(t, PerSecond(1), 1)
	d, tk := admit(tb, context.Background(), 0)
	require.True(t, d.Allowed)
	r := tb.reserveNAt(0, 1)
	require.Equal(t, time.Second, r.delayFrom(0))
	tb.Done(tk, sluice.Released, 0, 0)
	assert.False(t, tb.AllowAt(time.Second), "the turn at 1s belongs to the reservation")
	assert.True(t, tb.AllowAt(2*time.Second))
}

// TestTokenBucketCancelledWaiterLeavesNoTrace pins that a waiter that gives
// up, as WaitN does when its context ends, leaves no trace: an admission made
// before it and released after still gives its token back, as it does when
// nobody waited. A waiter behind keeps its turn.
func TestTokenBucketCancelledWaiterLeavesNoTrace(t *testing.T) {
	const m = time.Millisecond
	t.Run("the last waiter", func(t *testing.T) {
		tb := mustTokenBucket(t, PerSecond(10), 1)
		d, tk := admit(tb, context.Background(), 0) // the bucket's only token
		require.True(t, d.Allowed)
		r := tb.reserveNAt(0, 1) // its token comes at 100ms
		require.Equal(t, 100*m, r.delayFrom(0))
		r.cancelAt(30 * m)
		tb.Done(tk, sluice.Released, 30*m, 30*m) // the admission never ran
		assert.InDelta(t, 1, tb.TokensAt(30*m), 1e-9, "the released token is back")
		assert.True(t, tb.AllowAt(30*m))
	})
	t.Run("waiters cancelled last first", func(t *testing.T) {
		tb := mustTokenBucket(t, PerSecond(10), 2)
		ctx := context.Background()
		_, first := admit(tb, ctx, 0)
		d, second := admit(tb, ctx, 0) // the bucket is empty
		require.True(t, d.Allowed)
		a := tb.reserveNAt(0, 1) // at 100ms
		b := tb.reserveNAt(0, 1) // at 200ms
		b.cancelAt(0)
		tb.Done(first, sluice.Released, 0, 0) // a still waits: kept
		assert.InDelta(t, -1, tb.TokensAt(0), 1e-9)
		a.cancelAt(0)
		assert.InDelta(t, 0, tb.TokensAt(0), 1e-9)
		tb.Done(second, sluice.Released, 0, 0) // nobody waits any more
		assert.InDelta(t, 1, tb.TokensAt(0), 1e-9, "the released token is back")
	})
	t.Run("an abandoned WaitN", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			clk := monoclock.New()
			tb := mustTokenBucket(t, PerSecond(10), 1, WithClock(clk))
			d, tk := admit(tb, context.Background(), clk.Now())
			require.True(t, d.Allowed)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error)
			go func() { errc <- tb.WaitN(ctx, 1) }()
			time.Sleep(30 * time.Millisecond)
			cancel()
			require.ErrorIs(t, <-errc, context.Canceled)
			tb.Done(tk, sluice.Released, clk.Now(), clk.Now())
			assert.InDelta(t, 1, tb.TokensAt(clk.Now()), 1e-9, "the released token is back")
		})
	})
}

func TestTokenBucketSetLimitRate(t *testing.T) {
	const m = time.Millisecond
	tb := mustTokenBucket(t, PerSecond(10), 10)
	require.True(t, tb.AllowNAt(0, 10))
	require.NoError(t, tb.setRateAt(0, PerSecond(20)))
	assert.Equal(t, PerSecond(20), tb.Rate())
	assert.InDelta(t, 0, tb.TokensAt(0), 1e-9)
	assert.InDelta(t, 5, tb.TokensAt(250*m), 1e-9)
	// Down again: the 5 missing tokens stay missing at the slower rate.
	require.NoError(t, tb.setRateAt(250*m, PerSecond(10)))
	assert.InDelta(t, 5, tb.TokensAt(250*m), 1e-9)
	assert.InDelta(t, 10, tb.TokensAt(750*m), 1e-9)

	require.Error(t, tb.setRateAt(0, Rate{}))
	require.Error(t, tb.SetLimit(Rate{Count: 5}, tb.Burst()))
	assert.Equal(t, PerSecond(10), tb.Rate())
}

func TestTokenBucketSetLimitBurst(t *testing.T) {
	tb := mustTokenBucket(t, PerSecond(10), 10)
	require.True(t, tb.AllowNAt(0, 3))
	require.NoError(t, tb.setBurstAt(0, 20))
	assert.Equal(t, int64(20), tb.Burst())
	assert.InDelta(t, 17, tb.TokensAt(0), 1e-9)
	assert.True(t, tb.AllowNAt(0, 17))
	assert.False(t, tb.AllowAt(0))
	require.NoError(t, tb.setBurstAt(0, 5))
	assert.InDelta(t, -15, tb.TokensAt(0), 1e-9)
	assert.InDelta(t, 5, tb.TokensAt(2*time.Second), 1e-9)

	require.Error(t, tb.setBurstAt(0, 0))
	require.Error(t, tb.SetLimit(tb.Rate(), math.MaxInt64))
	assert.Equal(t, int64(5), tb.Burst())
	require.NoError(t, tb.SetLimit(tb.Rate(), 6))
	require.NoError(t, tb.SetLimit(PerSecond(12), tb.Burst()))
}

func TestTokenBucketWait(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		tb := mustTokenBucket(t, PerSecond(10), 2, WithClock(clk))
		ctx := context.Background()
		start := clk.Now()
		require.NoError(t, tb.WaitN(ctx, 2))
		assert.Equal(t, start, clk.Now(), "tokens there: no wait")
		require.NoError(t, tb.Wait(ctx))
		assert.Equal(t, 100*time.Millisecond, clk.Now()-start)
		require.NoError(t, tb.WaitN(ctx, 2))
		assert.Equal(t, 300*time.Millisecond, clk.Now()-start)
	})
}

func TestTokenBucketWaitRejectsUpFront(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		tb := mustTokenBucket(t, PerSecond(10), 2, WithClock(clk))
		require.True(t, tb.AllowN(2))

		// More than the burst: never, at once.
		err := tb.WaitN(context.Background(), 3)
		require.ErrorIs(t, err, ErrNeverSatisfiable)
		require.ErrorIs(t, err, sluice.ErrRejected)
		assert.Zero(t, clk.Now())

		// The token comes at 100ms, the deadline is at 50ms: reject now,
		// take nothing.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err = tb.Wait(ctx)
		require.ErrorIs(t, err, ErrWouldExceedDeadline)
		require.ErrorIs(t, err, sluice.ErrRateLimited)
		d, ok := sluice.RejectionOf(err)
		require.True(t, ok)
		assert.Equal(t, 100*time.Millisecond, d.RetryAfter)
		assert.Zero(t, clk.Now())
		assert.InDelta(t, 0, tb.TokensAt(0), 1e-9)

		// A context that has ended already.
		done, cancelDone := context.WithCancel(context.Background())
		cancelDone()
		require.ErrorIs(t, tb.Wait(done), context.Canceled)
	})
}

func TestTokenBucketWaitCancelGivesBack(t *testing.T) {
	spentBucket(t, func(t *testing.T, clk sluice.Clock, tb *TokenBucket) {
		abandonedWait(t, tb, func() { time.Sleep(30 * time.Millisecond) })
		assert.Equal(t, 30*time.Millisecond, clk.Now())
		// As if the waiter had never come: the token is back at 100ms.
		assert.InDelta(t, 0.3, tb.TokensAt(clk.Now()), 1e-9)
		time.Sleep(70 * time.Millisecond)
		assert.True(t, tb.Allow())
	})
}

// spentBucket runs fn in a synctest bubble with a bucket of one token every
// 100ms on the bubble's clock, its token just taken.
func spentBucket(t *testing.T, fn func(t *testing.T, clk sluice.Clock, tb *TokenBucket)) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		tb := mustTokenBucket(t, PerSecond(10), 1, WithClock(clk))
		require.True(t, tb.Allow())
		fn(t, clk, tb)
	})
}

// abandonedWait starts a WaitN of one token on tb in a synctest bubble, runs
// during once the waiter blocks, then cancels the wait.
func abandonedWait(t *testing.T, tb *TokenBucket, during func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- tb.WaitN(ctx, 1) }()
	synctest.Wait()
	during()
	synctest.Wait()
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
}

// TestTokenBucketWaitCancelAfterSetLimit pins the exception of WaitN's doc:
// a wait abandoned after SetLimit ran during it gives nothing back, as
// CancelAt does for a reservation made before a reconfiguration.
func TestTokenBucketWaitCancelAfterSetLimit(t *testing.T) {
	spentBucket(t, func(t *testing.T, clk sluice.Clock, tb *TokenBucket) {
		abandonedWait(t, tb, func() { // its token comes at 100ms
			require.NoError(t, tb.SetLimit(PerSecond(10), tb.Burst()))
			time.Sleep(30 * time.Millisecond)
		})
		assert.InDelta(t, -0.7, tb.TokensAt(clk.Now()), 1e-9, "the waiter's token stays taken")
	})
}

func TestTokenBucketConformance(t *testing.T) {
	policytest.Run(t, policytest.Config{
		New:    func(t *testing.T) sluice.Policy { return mustTokenBucket(t, PerSecond(1000), 10) },
		Causes: []error{sluice.ErrRateLimited},
	})
}

func TestTokenBucketBoundary(t *testing.T) {
	tb := mustTokenBucket(t, PerSecond(100), 100)
	admitted := 0
	for _, at := range []time.Duration{990 * time.Millisecond, 1010 * time.Millisecond} {
		for range 100 {
			if tb.AllowAt(at) {
				admitted++
			}
		}
	}
	assert.Equal(t, 102, admitted)
}

func TestTokenBucketConcurrentNeverOver(t *testing.T) {
	tb := mustTokenBucket(t, PerSecond(1000), 20)
	n := bucketHammer(t, 20, time.Millisecond, 10*time.Microsecond, tb.AllowAt)
	t.Logf("admitted %d", n)
}

// TestTokenBucketConcurrentReconfigure changes the rate and the burst back
// and forth, at the instants the deciding goroutines use, while 64 goroutines
// decide: the bound of the faster rate and the larger burst holds
// throughout.
func TestTokenBucketConcurrentReconfigure(t *testing.T) {
	tb := mustTokenBucket(t, PerSecond(1000), 20)
	var latest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := PerSecond(1000)
			if i%2 == 1 {
				r = PerSecond(400)
			}
			now := time.Duration(latest.Load())
			if err := tb.setRateAt(now, r); err != nil {
				panic(err)
			}
			if err := tb.setBurstAt(now, 10+int64(i%11)); err != nil {
				panic(err)
			}
		}
	})
	bucketHammer(t, 20, time.Millisecond, 10*time.Microsecond, func(now time.Duration) bool {
		latest.Store(int64(now))
		return tb.AllowAt(now)
	})
}

func TestTokenBucketAllocatesNothing(t *testing.T) {
	tb := mustTokenBucket(t, PerSecond(1_000_000), 1000)
	ctx := context.Background()
	var now time.Duration
	allocs := testing.AllocsPerRun(1000, func() {
		now += time.Microsecond
		tb.AllowAt(now)
		tb.Allow()
		d, tk := admit(tb, ctx, now)
		if d.Allowed {
			tb.Done(tk, sluice.Released, now, 0)
		}
		_ = decideAt(tb, now, 5000)
		r := tb.reserveNAt(now, 2)
		r.cancelAt(now)
	})
	assert.Zero(t, allocs)
}

// TestTokenBucketConcurrentMixedNeverOver has 64 goroutines mix every way of
// taking and giving back tokens: Allow, Admit then Released, reservations
// kept or cancelled. The tokens used (admissions kept, reservations kept, at
// their instants) never exceed burst + elapsed × rate.
func TestTokenBucketConcurrentMixedNeverOver(t *testing.T) {
	const burst, workers, calls = 10, 64, 300
	iv := time.Millisecond
	tb := mustTokenBucket(t, PerSecond(1000), burst)
	var clock, used, latest atomic.Int64
	observe := func(at int64) {
		for {
			l := latest.Load()
			if at <= l || latest.CompareAndSwap(l, at) {
				return
			}
		}
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				now := clock.Add(int64(10 * time.Microsecond))
				switch (w + i) % 4 {
				case 0:
					if tb.AllowAt(time.Duration(now)) {
						used.Add(1)
						observe(now)
					}
				case 1:
					if d, tk := admit(tb, ctx, time.Duration(now)); d.Allowed {
						tb.Done(tk, sluice.Released, time.Duration(now), 0)
					}
				case 2:
					r := tb.reserveNAt(time.Duration(now), 2)
					r.cancelAt(time.Duration(now))
				case 3:
					if r := tb.reserveNAt(time.Duration(now), 1); r.delayFrom(time.Duration(now)) <= 2*iv {
						used.Add(1)
						observe(now + int64(r.delayFrom(time.Duration(now))))
					} else {
						r.cancelAt(time.Duration(now))
					}
				}
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, used.Load(), burst+latest.Load()/int64(iv))
	assert.Positive(t, used.Load())
}

// TestTokenBucketWaitTokensAtTheDeadline pins that tokens due exactly at the
// context's deadline are taken: the wait neither rejects up front nor loses
// the race with the deadline.
func TestTokenBucketWaitTokensAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		tb := mustTokenBucket(t, PerSecond(10), 1, WithClock(clk))
		require.True(t, tb.Allow())
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		require.NoError(t, tb.Wait(ctx))
		assert.Equal(t, 100*time.Millisecond, clk.Now())
		assert.False(t, tb.Allow(), "the token was taken")
	})
}

// Reservations that pile up debt stop being granted before the TAT would
// overflow: the bucket never reads full again after a flood of them.
func TestTokenBucketReservationsCannotOverflow(t *testing.T) {
	tb, err := NewTokenBucket(Rate{Count: 1, Period: time.Hour}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var prev time.Duration
	refused := false
	for i := range 3000 {
		r := tb.reserveNAt(0, 1000)
		if !r.ok {
			refused = true
			break
		}
		if d := r.delayFrom(0); d < prev || d > time.Duration(maxTolerance) {
			t.Fatalf("reservation %d: delay %v after %v", i, d, prev)
		}
		prev = r.delayFrom(0)
		if tb.AllowAt(0) {
			t.Fatalf("after %d reservations of a full burst each, Allow admits at once", i+1)
		}
	}
	if !refused {
		t.Fatal("3000 reservations of 1000 hours each all granted")
	}
	if tb.AllowAt(0) {
		t.Error("Allow admits at once behind 146 years of reservations")
	}
	err = tb.WaitN(context.Background(), 1000) // what the last reservation was refused
	if !errors.Is(err, ErrWouldExceedDeadline) {
		t.Errorf("WaitN without a deadline behind the cap: %v, want ErrWouldExceedDeadline", err)
	}
}

// A request admitted before SetLimit lowered the burst below its cost still
// gives its tokens back when released, and the bucket is then full at its
// new burst, not in debt.
func TestTokenBucketReleaseAfterSetLimit(t *testing.T) {
	tb := mustTokenBucket(t, PerSecond(10), 5)
	d, tk := admit(tb, sluice.WithCost(context.Background(), 5), 0)
	require.True(t, d.Allowed)
	require.NoError(t, tb.setBurstAt(0, 2))
	require.Equal(t, -3.0, tb.TokensAt(0), "the missing tokens stay missing")
	tb.Done(tk, sluice.Released, 0, 0)
	assert.Equal(t, 2.0, tb.TokensAt(0), "full at the new burst")
	assert.True(t, tb.AllowAt(0))
}

// A release after a SetLimit that slowed the rate gives back what had not
// refilled of its tokens, counting the time before the change at the old
// rate: of the 10 taken at 0, 9 had refilled by 900 ms at 10/s, so 1 comes
// back, not the 9 the new rate of one in 10 s would leave unrefilled. A
// release of a request admitted before two changes gives nothing back.
func TestTokenBucketReleaseAfterSlowerRateCountsTheOldRefill(t *testing.T) {
	clk := sluice.NewManualClock(0)
	tb := mustTokenBucket(t, PerSecond(10), 10, WithClock(clk))
	d, tkA := admit(tb, sluice.WithCost(context.Background(), 10), 0)
	require.True(t, d.Allowed)
	const now = 900 * time.Millisecond
	clk.Set(now)
	require.NoError(t, tb.SetLimit(Every(10*time.Second), 10))
	d, _ = admit(tb, sluice.WithCost(context.Background(), 9), now)
	require.True(t, d.Allowed, "the 9 tokens refilled by then")
	tb.Done(tkA, sluice.Released, now, now)
	assert.InDelta(t, 1.0, tb.TokensAt(now), 1e-9, "one token of A's had not refilled")

	d, tkB := admit(tb, context.Background(), now)
	require.True(t, d.Allowed)
	clk.Advance(time.Millisecond)
	require.NoError(t, tb.SetLimit(PerSecond(1), 10))
	require.NoError(t, tb.SetLimit(PerSecond(2), 10))
	end := now + 2*time.Millisecond
	before := tb.TokensAt(end)
	tb.Done(tkB, sluice.Released, end, 2*time.Millisecond)
	assert.Equal(t, before, tb.TokensAt(end), "admitted before two changes: nothing back")
}

// TestTokenBucketNonLastCancelsKeepTheBurst pins that cancelling reservations
// that are not the last gives back nothing a later reservation was granted
// against: two such cancels must not let newcomers share the instant of a
// reservation made before them beyond the burst.
func TestTokenBucketNonLastCancelsKeepTheBurst(t *testing.T) {
	const s = time.Second
	tb := mustTokenBucket(t, PerSecond(1), 4)
	require.True(t, tb.AllowNAt(0, 4)) // the bucket is empty
	a := tb.reserveNAt(0, 4)           // at 4s
	b := tb.reserveNAt(0, 4)           // at 8s
	c := tb.reserveNAt(0, 1)           // at 9s
	require.Equal(t, 9*s, c.delayFrom(0))
	b.cancelAt(0) // neither is the last: c was granted behind them
	a.cancelAt(0)

	// c takes its token at 9s; with it, at most the burst may go at 9s.
	require.Zero(t, c.delayFrom(9*s))
	used := c.n
	for i := 0; i < 8 && tb.AllowAt(9*s); i++ {
		used++
	}
	assert.LessOrEqual(t, used, tb.Burst(), "tokens used at the single instant 9s")
}

// TestTokenBucketAdmitAgreesWithDecide asks twin buckets the same requests,
// one through Admit, which takes an admission within the burst straight
// from its compare-and-swap, and one through the decision every other form
// makes: admissions within the burst, rejections, a cost above the burst, a
// burst changed on the way.
func TestTokenBucketAdmitAgreesWithDecide(t *testing.T) {
	a, err := NewTokenBucket(PerSecond(10), 5)
	require.NoError(t, err)
	f, err := NewTokenBucket(PerSecond(10), 5)
	require.NoError(t, err)
	steps := []struct {
		at   time.Duration
		cost int64
	}{
		{0, 1}, {0, 2}, {0, 0}, {10 * time.Millisecond, 1}, {20 * time.Millisecond, 3},
		{30 * time.Millisecond, 9}, {250 * time.Millisecond, 2}, {time.Second, 5},
		{time.Second, 1}, {3 * time.Second, -4},
	}
	admitted, rejected := 0, 0
	for i, s := range steps {
		if i == 7 {
			require.NoError(t, a.setBurstAt(s.at, 8))
			require.NoError(t, f.setBurstAt(s.at, 8))
		}
		ctx := sluice.WithCost(context.Background(), s.cost)
		want, wt := a.admitD(ctx, s.at)
		got, tk := admit(f, ctx, s.at)
		assert.Equal(t, want, got, "step %d", i)
		if !got.Allowed {
			rejected++
			continue
		}
		assert.Equal(t, wt, tk, "step %d", i)
		admitted++
	}
	assert.Positive(t, admitted)
	assert.Positive(t, rejected)
}

// reserveNAt reserves n tokens (below 1 counts as 1) at instant now, however
// long the wait for them; the reservation says how long (delayFrom). It is
// granted unless n exceeds the burst, or the reservations already granted
// reach so far ahead that this one's tokens would come more than 2^62ns
// (146 years) after now.
func (tb *TokenBucket) reserveNAt(now time.Duration, n int64) reservation {
	r, _ := tb.reserve(int64(now), max(n, 1), math.MaxInt64)
	return r
}
