package ratelimit

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policytest"
)

// TestKeyedAdmitAgrees drives two Keyeds alike, one of this package's
// limiters and one of limiters that have the Policy methods alone, over
// keys, keyless requests and keys whose limiter cannot be made: they must
// decide alike, in the Keyed's name, and each Done must reach the limiter
// that admitted. (Their tickets differ: each Keyed hashes keys to shards
// with a seed of its own.)
func TestKeyedAdmitAgrees(t *testing.T) {
	boom := errors.New("boom")
	for _, requireKey := range []bool{false, true} {
		var opts []Option
		if requireKey {
			opts = append(opts, RequireKey())
		}
		var allowedA, doneA, allowedB, doneB atomic.Int64
		newLimiter := func(wrap func(*FixedWindow) sluice.Policy) func(string) (sluice.Policy, error) {
			return func(key string) (sluice.Policy, error) {
				if key == "bad" {
					return nil, boom
				}
				w, err := NewFixedWindow(3, 10*ms)
				return wrap(w), err
			}
		}
		a := mustKeyed(t, newLimiter(func(w *FixedWindow) sluice.Policy {
			return countingLimiter{w, &allowedA, &doneA}
		}), opts...)
		b := mustKeyed(t, newLimiter(func(w *FixedWindow) sluice.Policy {
			return countingLimiter{admitOnly{w}, &allowedB, &doneB}
		}), opts...)
		// The probe each made at construction admitted nothing.
		ctxs := []context.Context{keyCtx("a"), keyCtx("b"), context.Background(), keyCtx("bad"), keyCtx("c"), keyCtx("a")}
		var admitted, rejected, limited int
		for i := range 600 {
			now := time.Duration(i) * ms / 3
			ctx := ctxs[i%len(ctxs)]
			da, ta := policytest.Admit(ctx, a, now)
			db, tb := policytest.Admit(ctx, b, now)
			require.Equal(t, da, db, "call %d at %v", i, now)
			if da.Cause != nil {
				rejected++
				switch {
				case errors.Is(da.Cause, boom):
					assert.Equal(t, 3, i%len(ctxs), "only the bad key fails")
				case errors.Is(da.Cause, ErrNoKey):
					assert.True(t, requireKey)
				default:
					assert.ErrorIs(t, da.Cause, sluice.ErrRateLimited)
					limited++
				}
				continue
			}
			admitted++
			o := []sluice.Outcome{sluice.Success, sluice.Released, sluice.Failure}[i%3]
			a.Done(ta, o, now, ms)
			b.Done(tb, o, now, ms)
		}
		assert.Positive(t, admitted)
		assert.Positive(t, rejected)
		assert.Positive(t, limited, "no key's limiter rejected")
		assert.Equal(t, int64(admitted), allowedA.Load())
		assert.Equal(t, int64(admitted), doneA.Load(), "every Done reached the limiter that admitted")
		assert.Equal(t, int64(admitted), allowedB.Load())
		assert.Equal(t, int64(admitted), doneB.Load())
	}
}

func TestKeyedAdmitsWithoutAllocating(t *testing.T) {
	for name, newLimiter := range map[string]func(string) (sluice.Policy, error){
		"of this package": fixedPer(1000, time.Second, nil),
		"admit only": func(string) (sluice.Policy, error) {
			w, err := NewFixedWindow(1000, time.Second)
			return admitOnly{w}, err
		},
	} {
		k := mustKeyed(t, newLimiter)
		ctx := keyCtx("203.0.113.7")
		require.True(t, allowKeyAt(k, 0, "203.0.113.7"))
		var now time.Duration
		allocs := testing.AllocsPerRun(1000, func() {
			now += ms
			v := policytest.AnswerOf(k.Admit(ctx, now))
			if v.Cause != nil {
				t.Fatalf("%s: rejected: %v", name, v.Cause)
			}
			k.Done(v.Ticket, sluice.Success, now, -1)
		})
		assert.Zero(t, allocs, name)
	}
}

// Keyed needs of a Guard what the limiters it makes need.
func TestKeyedNeedsWhatItsLimitersNeed(t *testing.T) {
	k := mustKeyed(t, fixedPer(10, time.Second, nil))
	assert.Zero(t, k.Needs())
	for _, needs := range []sluice.Needs{sluice.NeedsEnd, sluice.Waits, sluice.NeedsEnd | sluice.Waits} {
		k := mustKeyed(t, func(string) (sluice.Policy, error) {
			w, err := NewFixedWindow(10, time.Second)
			return needing{w, needs}, err
		})
		assert.Equal(t, needs, k.Needs())
	}
}

// needing is a limiter that declares needs.
type needing struct {
	sluice.Policy
	needs sluice.Needs
}

func (n needing) Needs() sluice.Needs { return n.needs }
