package ratelimit

import (
	"context"
	"errors"
	"sync"
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

func mustShaper(t testing.TB, r Rate, maxWait time.Duration, opts ...Option) *Shaper {
	t.Helper()
	s, err := NewShaper(r, maxWait, opts...)
	require.NoError(t, err)
	return s
}

// TestShaperSteps walks a shaper that never waits (maxWait 0) through its
// turns: one request every 100ms, a request of cost n taking n turns.
func TestShaperSteps(t *testing.T) {
	const m = time.Millisecond
	s := mustShaper(t, PerSecond(10), 0)
	runSteps(t, s, []step{
		{at: 0, allowed: true, remaining: 0, reset: 100 * m},
		{at: 50 * m, allowed: false, remaining: 0, reset: 50 * m, retryAfter: 50 * m},
		{at: 100 * m, allowed: true, remaining: 0, reset: 100 * m},
		{at: 200 * m, n: 3, allowed: true, remaining: 0, reset: 300 * m},
		{at: 300 * m, allowed: false, remaining: 0, reset: 200 * m, retryAfter: 200 * m},
		// Released: the turn comes back.
		{at: 500 * m, allowed: true, remaining: 0, reset: 100 * m, release: true},
		{at: 500 * m, allowed: true, remaining: 0, reset: 100 * m},
		// The clock jumps back: nothing extra.
		{at: 100 * m, allowed: false, remaining: 0, reset: 500 * m, retryAfter: 500 * m},
		{at: time.Second, allowed: true, remaining: 0, reset: 100 * m},
	})
	d := decideAt(s, 0, 1<<62)
	require.ErrorIs(t, d.Cause, ErrNeverSatisfiable)
	assert.Equal(t, int64(1), d.Limit)
	assert.Equal(t, "ratelimit/shaper", d.Policy)
}

// TestShaperQueueFields pins Limit and Remaining of a shaper with a queue:
// maxWait 250ms at 100ms a turn holds 3 unit requests. Every request here
// finds its turn now or beyond the wait, so Admit never sleeps.
func TestShaperQueueFields(t *testing.T) {
	const m = time.Millisecond
	s := mustShaper(t, PerSecond(10), 250*m)
	d := decideAt(s, 0, 1)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(3), d.Limit)
	assert.Equal(t, int64(2), d.Remaining) // turns at 100ms and 200ms are left
	assert.Equal(t, 100*m, d.Reset)
	assert.False(t, s.allowNAt(0, 1), "its turn is at 100ms: the bare answer never waits")
	assert.True(t, s.allowNAt(100*m, 2)) // the turns at 100ms and 200ms; the next is at 300ms
	d = decideAt(s, 0, 1)                // a turn at 300ms lies beyond the 250ms wait
	require.False(t, d.Allowed)
	assert.Equal(t, int64(3), d.Limit)
	assert.Equal(t, int64(0), d.Remaining)
	assert.Equal(t, 300*m, d.Reset)
	assert.Equal(t, 50*m, d.RetryAfter, "a caller retries when its turn comes within the wait")
	assert.False(t, s.allowNAt(250*m, 1))
	assert.True(t, s.allowNAt(300*m, 1))
}

func TestShaperValidation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		r       Rate
		maxWait time.Duration
		opts    []Option
	}{
		{"zero rate", Rate{}, 0, nil},
		{"zero period", Rate{Count: 3}, 0, nil},
		{"negative wait", PerSecond(1), -time.Millisecond, nil},
		{"huge wait", PerSecond(1), 1<<63 - 1, nil},
		{"nil clock", PerSecond(1), 0, []Option{WithClock(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewShaper(tc.r, tc.maxWait, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, s)
		})
	}
	clk := sluice.NewManualClock(0)
	s := mustShaper(t, PerSecond(10), 0, WithName("ratelimit/smooth"))
	assert.Equal(t, "ratelimit/smooth", s.Name())
	assert.True(t, s.allowNAt(clk.Now(), 1))
	assert.False(t, s.allowNAt(clk.Now(), 1))
	clk.Advance(100 * time.Millisecond)
	assert.True(t, s.allowNAt(clk.Now(), 2))
	assert.False(t, s.allowNAt(clk.Now(), 1<<62))
	sys := mustShaper(t, Rate{Count: 1, Period: time.Hour}, 0)
	assert.True(t, sys.allowNAt(monoclock.Now(), 1))
	assert.False(t, sys.allowNAt(monoclock.Now(), 1))
}

// TestShaperAdmitSpacesRequests has five requests arrive at once at a shaper
// of 10/s with a queue of 250ms: three go through 100ms apart, two are
// rejected at once, saying when their turn would be within reach.
func TestShaperAdmitSpacesRequests(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		const m = time.Millisecond
		clk := monoclock.New()
		s := mustShaper(t, PerSecond(10), 250*m)
		type result struct {
			d  sluice.Decision
			at time.Duration
		}
		results := make([]result, 5)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() {
				d, _ := admit(s, context.Background(), 0)
				results[i] = result{d, clk.Now()}
			})
			synctest.Wait() // in order: each takes the next turn
		}
		wg.Wait()
		for i, want := range []time.Duration{0, 100 * m, 200 * m} {
			assert.True(t, results[i].d.Allowed, "request %d", i)
			assert.Equal(t, want, results[i].at, "request %d proceeds at its turn", i)
		}
		for i, retry := range []time.Duration{50 * m, 50 * m} {
			r := results[3+i]
			assert.False(t, r.d.Allowed)
			assert.ErrorIs(t, r.d.Cause, sluice.ErrRateLimited)
			assert.Equal(t, retry, r.d.RetryAfter)
			assert.Zero(t, r.at, "rejected at once")
		}
	})
}

func TestShaperRejectsBeyondDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const m = time.Millisecond
		clk := monoclock.New()
		s := mustShaper(t, PerSecond(10), time.Second)
		require.True(t, s.allowNAt(clk.Now(), 1))
		ctx, cancel := context.WithTimeout(context.Background(), 150*m)
		defer cancel()
		require.NoError(t, waitTurn(s, ctx, clk, 1)) // turn at 100ms
		assert.Equal(t, 100*m, clk.Now())
		// The next turn is at 200ms, past the deadline at 150ms: at once.
		d, _ := admit(s, ctx, clk.Now())
		require.False(t, d.Allowed)
		require.ErrorIs(t, d.Cause, ErrWouldExceedDeadline)
		assert.Equal(t, 50*m, d.RetryAfter)
		err := waitTurn(s, ctx, clk, 1)
		require.ErrorIs(t, err, ErrWouldExceedDeadline)
		require.ErrorIs(t, err, sluice.ErrRejected)
		assert.Equal(t, 100*m, clk.Now())
		// Nothing was taken: the turn at 200ms is free.
		assert.True(t, s.allowNAt(200*m, 1))
		// Beyond the maximum wait.
		require.True(t, s.allowNAt(300*m, 20)) // next turn at 2.3s
		err = waitTurn(s, context.Background(), clk, 1)
		require.ErrorIs(t, err, sluice.ErrRateLimited)
		require.NotErrorIs(t, err, ErrWouldExceedDeadline)
		require.ErrorIs(t, waitTurn(s, context.Background(), clk, 1<<62), ErrNeverSatisfiable)
		dead, cancelDead := context.WithCancel(context.Background())
		cancelDead()
		require.ErrorIs(t, waitTurn(s, dead, clk, 1), context.Canceled)
	})
}

// TestShaperCancelledWaiterGivesTurnBack cancels the last waiter: its turn
// goes to the next arrival. A waiter in the middle of the queue leaves its
// turn empty: the requests behind it keep theirs.
func TestShaperCancelledWaiterGivesTurnBack(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		const m = time.Millisecond
		clk := monoclock.New()
		s := mustShaper(t, PerSecond(10), time.Second)
		require.True(t, s.allowNAt(clk.Now(), 1)) // turn 0; next at 100ms
		ctx, cancel := context.WithCancel(context.Background())
		var d sluice.Decision
		done := make(chan struct{})
		go func() {
			d, _ = admit(s, ctx, clk.Now())
			close(done)
		}()
		time.Sleep(30 * m)
		cancel()
		<-done
		require.False(t, d.Allowed)
		require.ErrorIs(t, d.Cause, errWaitAbandoned)
		require.ErrorIs(t, d.Cause, context.Canceled)
		require.ErrorIs(t, d.Cause, sluice.ErrRateLimited)
		// As if it had never come: the turn at 100ms is free.
		require.NoError(t, waitTurn(s, context.Background(), clk, 1))
		assert.Equal(t, 100*m, clk.Now())

		// Middle of the queue: a waits for 200ms, b for 300ms; a gives up.
		ctxA, cancelA := context.WithCancel(context.Background())
		errA := make(chan error)
		go func() { errA <- waitTurn(s, ctxA, clk, 1) }()
		synctest.Wait()
		errB := make(chan error)
		go func() { errB <- waitTurn(s, context.Background(), clk, 1) }()
		synctest.Wait()
		cancelA()
		require.ErrorIs(t, <-errA, context.Canceled)
		require.NoError(t, <-errB)
		assert.Equal(t, 300*m, clk.Now(), "b keeps its turn")
		require.NoError(t, waitTurn(s, context.Background(), clk, 1))
		assert.Equal(t, 400*m, clk.Now())
	})
}

func TestShaperWaitAbandonedByDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		s := mustShaper(t, PerSecond(10), time.Second)
		require.True(t, s.allowNAt(clk.Now(), 1))
		// The deadline is far when the wait starts, then moves closer: a
		// parent context that ends first.
		parent, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
		defer cancel()
		ctx, cancel2 := context.WithTimeout(parent, time.Hour)
		defer cancel2()
		d, _ := admit(s, ctx, clk.Now())
		// The parent's deadline is seen up front.
		require.ErrorIs(t, d.Cause, ErrWouldExceedDeadline)

		ctx3, cancel3 := context.WithCancelCause(context.Background())
		go func() {
			time.Sleep(10 * time.Millisecond)
			cancel3(context.DeadlineExceeded)
		}()
		d, _ = admit(s, ctx3, clk.Now())
		require.ErrorIs(t, d.Cause, errWaitAbandoned)
		assert.True(t, errors.Is(d.Cause, context.Canceled))
	})
}

func TestShaperReleasedThroughGuard(t *testing.T) {
	s := mustShaper(t, PerSecond(10), 0)
	deny := denyPolicy{}
	clk := sluice.NewManualClock(0)
	g, err := sluice.New(sluice.With(s, deny), sluice.WithClock(clk))
	require.NoError(t, err)
	defer g.Close()
	for range 3 {
		err := g.Do(context.Background(), func(context.Context) error { return nil })
		require.ErrorIs(t, err, sluice.ErrOverloaded, "the inner policy rejects; the shaper's turn comes back each time")
	}
	assert.True(t, s.allowNAt(0, 1))
}

// TestShaperReleasedTurnOfAnyLength pins that a released request gives its
// turn back however long the turn: a bandwidth shaper whose cost is the
// request's size in bytes, a turn of hours, a turn after a wait.
func TestShaperReleasedTurnOfAnyLength(t *testing.T) {
	t.Run("a large cost", func(t *testing.T) {
		s := mustShaper(t, PerSecond(100_000_000), time.Second)            // 10ns a byte
		d, tk := admit(s, sluice.WithCost(context.Background(), 1<<32), 0) // 43s of turn
		require.True(t, d.Allowed)
		s.Done(tk, sluice.Released, 0, 0)
		assert.True(t, s.allowNAt(0, 1), "the released turn is free again")
	})
	t.Run("a long turn", func(t *testing.T) {
		s := mustShaper(t, Every(3*time.Hour), 0)
		d, tk := admit(s, context.Background(), 0)
		require.True(t, d.Allowed)
		s.Done(tk, sluice.Released, time.Millisecond, time.Millisecond)
		assert.True(t, s.allowNAt(time.Millisecond, 1), "the released turn is free again")
	})
	t.Run("after a wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			clk := monoclock.New()
			s := mustShaper(t, PerSecond(10), time.Second)
			require.True(t, s.allowNAt(0, 1))
			d, tk := admit(s, sluice.WithCost(context.Background(), 3), 0) // waits for its turn at 100ms
			require.True(t, d.Allowed)
			require.Equal(t, 100*time.Millisecond, clk.Now())
			s.Done(tk, sluice.Released, clk.Now(), clk.Now()) // the latency since its Admit
			assert.True(t, s.allowNAt(clk.Now(), 1), "the released turn is free again")
		})
	})
	t.Run("a cost its ticket cannot carry", func(t *testing.T) {
		// A maximum wait of 2^61ns leaves 2 bits of the ticket to the cost:
		// a cost of 4 or more gives nothing back, as Done says.
		for _, n := range []int64{3, 4} {
			s := mustShaper(t, PerSecond(1_000_000_000), 1<<61)
			d, tk := admit(s, sluice.WithCost(context.Background(), n), 0)
			require.True(t, d.Allowed)
			s.Done(tk, sluice.Released, 0, 0)
			assert.Equal(t, n < 4, s.allowNAt(0, 1), "cost %d", n)
		}
	})
}

// denyPolicy rejects every request.
type denyPolicy struct{}

func (denyPolicy) Name() string { return "deny" }
func (denyPolicy) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1, RetryAfter: time.Second}, sluice.ErrOverloaded
}
func (denyPolicy) Needs() sluice.Needs                                              { return 0 }
func (denyPolicy) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

// TestShaperConformance runs the suite on a shaper that does not wait: the
// suite's instants are not the wall clock a waiting Admit sleeps on. The
// waiting paths are checked in fake time above.
func TestShaperConformance(t *testing.T) {
	policytest.Run(t, policytest.Config{
		New:    func(t *testing.T) sluice.Policy { return mustShaper(t, Every(100*time.Microsecond), 0) },
		Causes: []error{sluice.ErrRateLimited},
	})
}

func TestShaperConcurrentNeverOver(t *testing.T) {
	s := mustShaper(t, PerSecond(1000), 0)
	n := bucketHammer(t, 1, time.Millisecond, 10*time.Microsecond, func(now time.Duration) bool { return s.allowNAt(now, 1) })
	t.Logf("admitted %d", n)
}

func TestShaperAllocatesNothing(t *testing.T) {
	s := mustShaper(t, PerSecond(1_000_000), 0)
	ctx := context.Background()
	var now time.Duration
	allocs := testing.AllocsPerRun(1000, func() {
		now += 10 * time.Microsecond
		s.allowNAt(now, 1)
		now += 10 * time.Microsecond
		d, tk := admit(s, ctx, now)
		if d.Allowed {
			s.Done(tk, sluice.Released, now, 0)
		}
		_ = decideAt(s, now, 1<<62)
	})
	assert.Zero(t, allocs)
}

// TestShaperTurnAtTheDeadline pins that a turn due exactly at the context's
// deadline is kept.
func TestShaperTurnAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		s := mustShaper(t, PerSecond(10), time.Second)
		require.True(t, s.allowNAt(clk.Now(), 1))
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		d, _ := admit(s, ctx, clk.Now())
		require.True(t, d.Allowed)
		assert.Equal(t, 100*time.Millisecond, clk.Now())
		assert.False(t, s.allowNAt(clk.Now(), 1), "the turn was taken")
	})
}

// TestShaperThroughGuardWaits runs a shaper in a Guard: three calls arriving
// together run 100ms apart, and every one is reported done.
func TestShaperThroughGuardWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		s := mustShaper(t, PerSecond(10), time.Second)
		g, err := sluice.New(sluice.With(s), sluice.WithClock(clk))
		require.NoError(t, err)
		defer g.Close()
		ran := make([]time.Duration, 3)
		var wg sync.WaitGroup
		for i := range ran {
			wg.Go(func() {
				require.NoError(t, g.Do(context.Background(), func(context.Context) error {
					ran[i] = clk.Now()
					return nil
				}))
			})
			synctest.Wait()
		}
		wg.Wait()
		assert.Equal(t, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}, ran)
	})
}

// The queue's end always fits in an int64: a wait or a cost too long to
// add up is refused, and a request behind the longest queue still waits.
func TestShaperQueueCannotOverflow(t *testing.T) {
	if _, err := NewShaper(PerSecond(1), 1<<62); err == nil {
		t.Error("a maximum wait of 2^62ns accepted")
	}
	if _, err := NewShaper(Every(1<<62), time.Second); err == nil {
		t.Error("a rate of one per 2^62ns accepted")
	}
	synctest.Test(t, func(t *testing.T) {
		s, err := NewShaper(PerSecond(1), 1<<61)
		if err != nil {
			t.Fatal(err)
		}
		n := int64(1<<61) / int64(time.Second) // the largest cost it accepts
		now := time.Second
		if !s.allowNAt(now, n) {
			t.Fatal("first request rejected")
		}
		if s.allowNAt(now, n+1) {
			t.Error("a cost above 2^61ns admitted")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Admit(sluice.WithCost(ctx, n), now) // queues behind it, within maxWait
		synctest.Wait()
		if s.allowNAt(now, 1) {
			t.Error("a request admitted at once behind a queue 146 years long")
		}
		cancel()
		synctest.Wait()
	})
}

// waitTurn takes the turn of a request of cost n through Admit at clk's
// reading, waiting for it as a Guard does, and returns its rejection, if
// any.
func waitTurn(s *Shaper, ctx context.Context, clk sluice.Clock, n int64) error {
	if n != 1 {
		ctx = sluice.WithCost(ctx, n)
	}
	if d, _ := admit(s, ctx, clk.Now()); !d.Allowed {
		return sluice.Rejection(d)
	}
	return nil
}
