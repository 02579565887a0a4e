package adaptive_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/policytest"
)

// admit asks p to admit a request at now, and returns the Decision its
// answer stands for and its Ticket.
func admit(p sluice.Policy, ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	return policytest.Admit(ctx, p, now)
}

// TestGuardAgreesWithAdmitWhileHeld drives two policies alike, one through
// Admit and Done and one through a sluice.Guard's Begin and End on a
// manual clock, holding each admitted call for a while, so that the limits
// fill and reject: they must decide alike, call for call.
func TestGuardAgreesWithAdmitWhileHeld(t *testing.T) {
	for name, mk := range map[string]func(t *testing.T) sluice.Policy{
		"bulkhead": func(t *testing.T) sluice.Policy {
			b, err := adaptive.NewBulkhead(3)
			require.NoError(t, err)
			return b
		},
		"shedder": func(t *testing.T) sluice.Policy {
			return newShedder(t, adaptive.WithQueue(0, 0))
		},
	} {
		t.Run(name, func(t *testing.T) {
			a, b := mk(t), mk(t)
			clk := sluice.NewManualClock(0)
			g, err := sluice.New(sluice.With(b), sluice.WithClock(clk))
			require.NoError(t, err)
			ctx := context.Background()
			type held struct {
				ta    sluice.Ticket
				call  sluice.Call
				at    time.Duration
				until time.Duration
			}
			var inflight []*held
			var admitted, rejected int
			for i := range 2000 {
				now := time.Duration(i) * ms / 2
				clk.Set(now)
				kept := inflight[:0]
				for j, h := range inflight {
					if h.until > now {
						kept = append(kept, h)
						continue
					}
					o := []sluice.Outcome{sluice.Success, sluice.Failure, sluice.Released, sluice.Success}[j%4]
					a.Done(h.ta, o, now, now-h.at)
					h.call.Report(o, nil)
				}
				inflight = kept
				da, ta := admit(a, ctx, now)
				var call sluice.Call
				err := g.Begin(ctx, &call)
				db := call.Decision()
				require.Equal(t, da.Allowed, db.Allowed, "call %d at %v", i, now)
				require.Equal(t, da.Allowed, err == nil, "call %d at %v", i, now)
				if !da.Allowed {
					require.Equal(t, da, db, "call %d at %v", i, now)
					d, ok := sluice.RejectionOf(err)
					require.True(t, ok)
					assert.Equal(t, da.Policy, d.Policy)
					assert.Equal(t, da.Cause, d.Cause)
					rejected++
					continue
				}
				admitted++
				hold := time.Duration(1+i%7) * ms
				if name == "shedder" {
					hold *= 10 // past its initial limit
				}
				inflight = append(inflight, &held{ta: ta, call: call, at: now, until: now + hold})
			}
			assert.Positive(t, admitted)
			assert.Positive(t, rejected)
		})
	}
}

// TestBulkheadAdmitWaitsInTheQueue: a queued bulkhead's Admit waits for
// a slot, and gives up when its wait runs out.
func TestBulkheadAdmitWaitsInTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(2, 50*ms))
		require.NoError(t, err)
		ctx := context.Background()
		first := policytest.AnswerOf(b.Admit(ctx, 0))
		require.NoError(t, first.Cause)
		assert.Equal(t, int64(-1), first.Limit)

		start := time.Now()
		type result struct {
			v  policytest.Answer
			at time.Time
		}
		ch := make(chan result, 1)
		go func() {
			v := policytest.AnswerOf(b.Admit(ctx, 0))
			ch <- result{v, time.Now()}
		}()
		synctest.Wait()
		assert.Equal(t, int64(1), b.Stats().Waiting)
		time.Sleep(10 * ms)
		b.Done(first.Ticket, sluice.Success, 0, 10*ms)
		r := <-ch
		require.NoError(t, r.v.Cause)
		assert.Equal(t, int64(-1), r.v.Limit)
		assert.Equal(t, 10*ms, r.at.Sub(start))

		// The slot is still taken: the next waits out its 50 ms.
		v := policytest.AnswerOf(b.Admit(ctx, 0))
		require.ErrorIs(t, v.Cause, sluice.ErrConcurrencyLimited)
		assert.Positive(t, v.RetryAfter)
		assert.Equal(t, 60*ms, time.Since(start))
	})
}

// Admitting and rejecting allocate nothing: a Shedder that takes a slot, a
// full one that rejects, alone and through a Guard, and a queue that
// rejects without waiting.
func TestAdmitAndRejectWithoutAllocating(t *testing.T) {
	ctx := context.Background()
	s := newShedder(t)
	now := time.Second
	allocs := testing.AllocsPerRun(1000, func() {
		now += 10 * time.Microsecond
		v := policytest.AnswerOf(s.Admit(ctx, now))
		if v.Cause != nil {
			t.Fatalf("rejected: %v", v.Cause)
		}
		s.Done(v.Ticket, sluice.Success, now, ms)
	})
	assert.Zero(t, allocs, "admit")

	full := newShedder(t, adaptive.WithQueue(0, 0))
	for range full.Stats().Limit {
		require.NoError(t, policytest.AnswerOf(full.Admit(ctx, 0)).Cause)
	}
	v := policytest.AnswerOf(full.Admit(ctx, 0))
	require.ErrorIs(t, v.Cause, sluice.ErrOverloaded)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = policytest.AnswerOf(full.Admit(ctx, 0)) }), "reject")
	sg, err := sluice.New(sluice.With(full))
	require.NoError(t, err)
	fn := func(context.Context) error { return nil }
	require.ErrorIs(t, sg.Do(ctx, fn), sluice.ErrOverloaded)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = sg.Do(ctx, fn) }), "reject through a Guard")

	queued, err := adaptive.NewBulkhead(1, adaptive.WithQueue(1, time.Hour))
	require.NoError(t, err)
	require.NoError(t, policytest.AnswerOf(queued.Admit(ctx, 0)).Cause)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		if policytest.AnswerOf(queued.Admit(cctx, 0)).Cause == nil {
			t.Fatal("admitted over the limit")
		}
	}), "reject without waiting")
}
