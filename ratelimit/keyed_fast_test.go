package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

// fastAnswerDecision returns the Decision that AdmitFast's answer stands for.
func fastAnswerDecision(p sluice.FastPolicy, q sluice.Quota, rej *sluice.RejectedError) sluice.Decision {
	if rej != nil {
		return rej.Decision
	}
	return q.Decision(p.Name())
}

// sharedRejection is a FastPolicy written elsewhere that hands every
// rejection the same *sluice.RejectedError, as it may, and notes when a
// caller has changed it.
type sharedRejection struct {
	*FixedWindow
	rej      *sluice.RejectedError
	tampered *bool
}

func (s sharedRejection) AdmitFast(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, *sluice.RejectedError) {
	if p := s.rej.Decision.Policy; p != "" && p != s.Name() {
		*s.tampered = true
	}
	t, q, rej := s.FixedWindow.AdmitFast(ctx, now)
	if rej != nil {
		*s.rej = *rej
		return 0, sluice.Quota{}, s.rej
	}
	return t, q, nil
}

// FastOf returns s itself, the owner of its AdmitFast (sluice.FastPolicy).
func (s sharedRejection) FastOf() sluice.Policy { return s }

// TestKeyedAdmitFastAgrees drives two Keyeds alike, one through Admit and
// one through AdmitFast, over keys, keyless requests, keys whose limiter
// cannot be made, and limiters with and without a fast form: they must
// decide alike, and each Done must reach the limiter that admitted. (Their
// tickets differ: each Keyed hashes keys to shards with a seed of its own.)
func TestKeyedAdmitFastAgrees(t *testing.T) {
	boom := errors.New("boom")
	tampered := false
	newLimiter := func(wrap func(*FixedWindow) sluice.Policy) func(string) (sluice.Policy, error) {
		return func(key string) (sluice.Policy, error) {
			if key == "bad" {
				return nil, boom
			}
			w, err := NewFixedWindow(3, 10*ms)
			return wrap(w), err
		}
	}
	for name, c := range map[string]struct {
		wrap    func(*FixedWindow) sluice.Policy
		missing MissingKey
	}{
		"fast":                {func(w *FixedWindow) sluice.Policy { return w }, MissingKeyShared},
		"fast, keys required": {func(w *FixedWindow) sluice.Policy { return w }, MissingKeyReject},
		"admit only":          {func(w *FixedWindow) sluice.Policy { return admitOnly{w} }, MissingKeyShared},
		"shared rejection": {func(w *FixedWindow) sluice.Policy {
			return sharedRejection{w, new(sluice.RejectedError), &tampered}
		}, MissingKeyShared},
	} {
		t.Run(name, func(t *testing.T) {
			a := mustKeyed(t, newLimiter(c.wrap), WithMissingKey(c.missing))
			b := mustKeyed(t, newLimiter(c.wrap), WithMissingKey(c.missing))
			ctxs := []context.Context{keyCtx("a"), keyCtx("b"), context.Background(), keyCtx("bad"), keyCtx("c"), keyCtx("a")}
			var admitted, rejected, limited int
			for i := range 600 {
				now := time.Duration(i) * ms / 3
				ctx := ctxs[i%len(ctxs)]
				da, ta := a.Admit(ctx, now)
				tb, q, rej := b.AdmitFast(ctx, now)
				require.Equal(t, da, fastAnswerDecision(b, q, rej), "call %d at %v", i, now)
				if rej != nil {
					rejected++
					if !errors.Is(rej, boom) && !errors.Is(rej, ErrMissingKey) {
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
			assert.False(t, tampered, "a limiter's own rejection was changed")
		})
	}
}

func TestKeyedAdmitFastAdmitsWithoutAllocating(t *testing.T) {
	for name, newLimiter := range map[string]func(string) (sluice.Policy, error){
		"fast": fixedPer(1000, time.Second, nil),
		"admit only": func(string) (sluice.Policy, error) {
			w, err := NewFixedWindow(1000, time.Second)
			return admitOnly{w}, err
		},
	} {
		k := mustKeyed(t, newLimiter)
		ctx := keyCtx("203.0.113.7")
		require.True(t, k.AllowKeyAt(0, "203.0.113.7"))
		var now time.Duration
		allocs := testing.AllocsPerRun(1000, func() {
			now += ms
			tk, _, rej := k.AdmitFast(ctx, now)
			if rej != nil {
				t.Fatalf("%s: rejected: %v", name, rej)
			}
			k.Done(tk, sluice.Success, now, 0)
		})
		assert.Zero(t, allocs, name)
	}
}

// TestFreshRejections: the limiters a Keyed renames in place do make a new
// rejection for each call.
func TestFreshRejections(t *testing.T) {
	ctx := context.Background()
	tb, err := NewTokenBucket(Every(time.Hour), 1)
	require.NoError(t, err)
	gcra, err := NewGCRA(Every(time.Hour), 1)
	require.NoError(t, err)
	lb, err := NewLeakyBucket(Every(time.Hour), 1)
	require.NoError(t, err)
	fw, err := NewFixedWindow(1, time.Hour)
	require.NoError(t, err)
	sw, err := NewSlidingWindow(1, time.Hour, 10)
	require.NoError(t, err)
	sl, err := NewSlidingLog(1, time.Hour)
	require.NoError(t, err)
	wu, err := NewWarmUp(Every(time.Hour), 1, time.Hour, 3)
	require.NoError(t, err)
	for _, p := range []sluice.FastPolicy{tb, gcra, lb, fw, sw, sl, wu} {
		require.True(t, freshRejections(p), p.Name())
		var seen []*sluice.RejectedError
		for range 4 {
			if _, _, rej := p.AdmitFast(ctx, 0); rej != nil {
				for _, s := range seen {
					require.NotSame(t, s, rej, p.Name())
				}
				seen = append(seen, rej)
			}
		}
		require.Len(t, seen, 3, "%s: one admission, then rejections", p.Name())
	}
	assert.False(t, freshRejections(sharedRejection{fw, nil, nil}))
	assert.False(t, freshRejections(admitOnly{fw}))
}
