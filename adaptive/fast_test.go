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
)

// fastDecision returns the Decision that AdmitFast's answer stands for.
func fastDecision(p sluice.FastPolicy, q sluice.Quota, rej *sluice.RejectedError) sluice.Decision {
	if rej != nil {
		return rej.Decision
	}
	return q.Decision(p.Name())
}

// TestFastAgreesWhileHeld drives two policies alike, one through Admit and
// one through AdmitFast, holding each admitted call for a while, so that
// the limits fill and reject: they must decide alike, call for call.
func TestFastAgreesWhileHeld(t *testing.T) {
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
			a, b := mk(t), mk(t).(sluice.FastPolicy)
			ctx := context.Background()
			type held struct {
				ta, tb sluice.Ticket
				until  time.Duration
			}
			var inflight []held
			var admitted, rejected int
			for i := range 2000 {
				now := time.Duration(i) * ms / 2
				kept := inflight[:0]
				for j, h := range inflight {
					if h.until > now {
						kept = append(kept, h)
						continue
					}
					o := []sluice.Outcome{sluice.Success, sluice.Failure, sluice.Released, sluice.Success}[j%4]
					a.Done(h.ta, o, now, 3*ms)
					b.Done(h.tb, o, now, 3*ms)
				}
				inflight = kept
				da, ta := a.Admit(ctx, now)
				tb, q, rej := b.AdmitFast(ctx, now)
				require.Equal(t, da, fastDecision(b, q, rej), "call %d at %v", i, now)
				if !da.Allowed {
					rejected++
					continue
				}
				admitted++
				hold := time.Duration(1+i%7) * ms
				if name == "shedder" {
					hold *= 10 // past its initial limit
				}
				inflight = append(inflight, held{ta, tb, now + hold})
			}
			assert.Positive(t, admitted)
			assert.Positive(t, rejected)
		})
	}
}

// TestBulkheadAdmitFastWaitsInTheQueue: a queued limit's AdmitFast
// waits for a slot as its Admit does, and gives up when its wait runs out.
func TestBulkheadAdmitFastWaitsInTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(2, 50*ms))
		require.NoError(t, err)
		ctx := context.Background()
		first, q, rej := b.AdmitFast(ctx, 0)
		require.Nil(t, rej)
		assert.Equal(t, sluice.Quota{Limit: -1}, q)

		start := time.Now()
		type result struct {
			q   sluice.Quota
			rej *sluice.RejectedError
			at  time.Time
		}
		ch := make(chan result, 1)
		go func() {
			_, q, rej := b.AdmitFast(ctx, 0)
			ch <- result{q, rej, time.Now()}
		}()
		synctest.Wait()
		assert.Equal(t, int64(1), b.Stats().Waiting)
		time.Sleep(10 * ms)
		b.Done(first, sluice.Success, 0, 10*ms)
		r := <-ch
		require.Nil(t, r.rej)
		assert.Equal(t, sluice.Quota{Limit: -1}, r.q)
		assert.Equal(t, 10*ms, r.at.Sub(start))

		// The slot is still taken: the next waits out its 50 ms.
		_, _, rej = b.AdmitFast(ctx, 0)
		require.NotNil(t, rej)
		require.ErrorIs(t, rej, sluice.ErrConcurrencyLimited)
		assert.Equal(t, 60*ms, time.Since(start))
	})
}

// Admitting and rejecting allocate nothing: a Shedder that took a slot, one
// that has no queue rejecting, and one whose queue is full.
func TestAdmitAndRejectWithoutAllocating(t *testing.T) {
	ctx := context.Background()
	s := newShedder(t)
	now := time.Second
	allocs := testing.AllocsPerRun(1000, func() {
		now += 10 * time.Microsecond
		tk, _, rej := s.AdmitFast(ctx, now)
		if rej != nil {
			t.Fatalf("rejected: %v", rej)
		}
		s.Done(tk, sluice.Success, now, ms)
	})
	assert.Zero(t, allocs, "admit")

	b, err := adaptive.NewBulkhead(1)
	require.NoError(t, err)
	_, _, rej := b.AdmitFast(ctx, 0)
	require.Nil(t, rej)
	allocs = testing.AllocsPerRun(1000, func() {
		if _, _, rej := b.AdmitFast(ctx, 0); rej == nil {
			t.Fatal("admitted over the limit")
		}
	})
	// The RejectedError is the one allocation of a rejection, as for every
	// policy's AdmitFast; Admit's Decision allocates nothing.
	assert.LessOrEqual(t, allocs, 1.0, "reject, fast form")
	allocs = testing.AllocsPerRun(1000, func() {
		if d, _ := b.Admit(ctx, 0); d.Allowed {
			t.Fatal("admitted over the limit")
		}
	})
	assert.Zero(t, allocs, "reject")

	full, err := adaptive.NewBulkhead(1, adaptive.WithQueue(1, time.Hour))
	require.NoError(t, err)
	d, _ := full.Admit(ctx, 0)
	require.True(t, d.Allowed)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	allocs = testing.AllocsPerRun(1000, func() {
		if d, _ := full.Admit(cctx, 0); d.Allowed {
			t.Fatal("admitted over the limit")
		}
	})
	assert.Zero(t, allocs, "reject without waiting")
}
