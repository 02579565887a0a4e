package adaptive_test

import (
	"context"
	"errors"
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
		"aimd": func(t *testing.T) sluice.Policy {
			l, err := adaptive.NewConcurrencyLimit(adaptive.WithAlgorithm(adaptive.AIMD{InitialLimit: 4, Window: 10 * ms}))
			require.NoError(t, err)
			return l
		},
		"bbr": func(t *testing.T) sluice.Policy {
			return newTestGuard(t, adaptive.NewManualSampler(0.95, 0), adaptive.WithMaxInflight(5))
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
				inflight = append(inflight, held{ta, tb, now + time.Duration(1+i%7)*ms})
			}
			assert.Positive(t, admitted)
			assert.Positive(t, rejected)
		})
	}
}

// TestConcurrencyLimitAdmitFastWaitsInTheQueue: a queued limit's AdmitFast
// waits for a slot as its Admit does, and gives up when its wait runs out.
func TestConcurrencyLimitAdmitFastWaitsInTheQueue(t *testing.T) {
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

func TestAdmitFastAdmitsWithoutAllocating(t *testing.T) {
	l, err := adaptive.NewConcurrencyLimit(adaptive.WithAlgorithm(adaptive.Gradient{Window: 10 * ms}))
	require.NoError(t, err)
	g := newTestGuard(t, adaptive.NewManualSampler(0.9, 0), adaptive.WithMaxInflight(1000), adaptive.WithMaxQPS(1e9))
	warm(t, g, 10, 10, 20*ms)
	ctx := context.Background()
	for _, p := range []sluice.FastPolicy{l, g} {
		now := time.Second
		allocs := testing.AllocsPerRun(1000, func() {
			now += 10 * time.Microsecond
			tk, _, rej := p.AdmitFast(ctx, now)
			if rej != nil {
				t.Fatalf("%s rejected: %v", p.Name(), rej)
			}
			p.Done(tk, sluice.Success, now, ms)
		})
		assert.Zero(t, allocs, p.Name())
	}
	// A shed carries the rule's cause.
	g2 := newTestGuard(t, adaptive.NewManualSampler(0, 0), adaptive.WithMaxInflight(1))
	_, _, rej := g2.AdmitFast(ctx, 0)
	require.Nil(t, rej)
	_, _, rej = g2.AdmitFast(ctx, 0)
	require.NotNil(t, rej)
	assert.True(t, errors.Is(rej, adaptive.ErrMaxInflight))
}
