package sluice_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/ratelimit"
)

func TestShadowedPolicyLetsItsRejectionsThroughAndHearsNoEnd(t *testing.T) {
	clk := sluice.NewManualClock(time.Second)
	outer := newRecorder("outer", -1)
	lim := newRecorder("limit", 2) // admits 2, then would reject
	ev := &events{}
	g := mustGuard(t, sluice.With(outer, lim), sluice.WithClock(clk), sluice.WithObserver(ev),
		sluice.WithShadow("limit"))

	ran := 0
	for range 5 {
		require.NoError(t, g.Do(t.Context(), func(context.Context) error { ran++; return nil }))
	}
	assert.Equal(t, 5, ran, "every call ran")
	assert.Len(t, lim.doneCalls(), 2, "the shadowed policy hears the end of the calls it admitted only")
	assert.Len(t, outer.doneCalls(), 5)

	s := g.Stats()
	assert.Equal(t, uint64(3), s.Policies[1].ShadowRejected)
	assert.Equal(t, uint64(0), s.Policies[0].ShadowRejected)
	assert.Equal(t, [sluice.CauseTimeout + 1]uint64{}, s.Policies[1].Rejected, "no rejection counted")
	require.Len(t, ev.got, 5)
	for i, e := range ev.got {
		assert.True(t, e.Admitted, i)
		if i < 2 {
			assert.False(t, e.Shadow, i)
			continue
		}
		assert.True(t, e.Shadow, i)
		assert.Equal(t, "limit", e.Policy)
		assert.Equal(t, sluice.CauseRateLimited, e.Cause)
	}

	// Back to enforcing: the same policy now rejects.
	require.NoError(t, g.SetShadow("limit", false))
	err := g.Do(t.Context(), func(context.Context) error { ran++; return nil })
	require.ErrorIs(t, err, sluice.ErrRateLimited)
	assert.Equal(t, 5, ran)
}

func TestShadowedPolicyIsReleasedWhenALaterPolicyRejects(t *testing.T) {
	first := newRecorder("first", 0) // would reject everything
	second := newRecorder("second", 1)
	third := newRecorder("third", 0) // rejects for real
	g := mustGuard(t, sluice.With(first, second, third), sluice.WithShadow("first"))
	err := g.Do(t.Context(), func(context.Context) error { return nil })
	require.ErrorIs(t, err, sluice.ErrRateLimited)
	assert.Empty(t, first.doneCalls(), "it admitted nothing, so it is told nothing")
	require.Len(t, second.doneCalls(), 1)
	assert.Equal(t, sluice.Released, second.doneCalls()[0].outcome)
	assert.Equal(t, int64(1), second.quota.Load(), "second got its quota back")
}

func TestShadowWholeGuard(t *testing.T) {
	a, b := newRecorder("a", 0), newRecorder("b", 0)
	g := mustGuard(t, sluice.With(a, b), sluice.WithObserver(&events{}))
	require.NoError(t, g.SetShadow("", true))
	require.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))
	s := g.Stats()
	assert.Equal(t, uint64(1), s.Policies[0].ShadowRejected)
	assert.Equal(t, uint64(1), s.Policies[1].ShadowRejected)
	assert.True(t, s.Shadowed)
	assert.True(t, s.Policies[0].Shadowed)
	assert.True(t, s.Policies[1].Shadowed)

	// A policy shadowed by name stays shadowed when the Guard's flag is off.
	require.NoError(t, g.SetShadow("b", true))
	require.NoError(t, g.SetShadow("", false))
	s = g.Stats()
	assert.False(t, s.Shadowed)
	assert.False(t, s.Policies[0].Shadowed)
	assert.True(t, s.Policies[1].Shadowed)
	err := g.Do(t.Context(), func(context.Context) error { return nil })
	d, ok := sluice.RejectionOf(err)
	require.True(t, ok)
	assert.Equal(t, "a", d.Policy)
	require.NoError(t, g.SetShadow("a", true))
	require.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))
}

func TestShadowRefusesUnknownNames(t *testing.T) {
	a := newRecorder("a", -1)
	_, err := sluice.New(sluice.With(a), sluice.WithShadow("nope"))
	require.Error(t, err)
	g := mustGuard(t, sluice.With(a))
	require.Error(t, g.SetShadow("nope", true))
	var nilGuard *sluice.Guard
	require.Error(t, nilGuard.SetShadow("", true))
}

func TestShadowOnAWaitingChainAndALongChain(t *testing.T) {
	// Chains longer than a Call's inline tickets take the slow path.
	ps := make([]sluice.Policy, 6)
	recs := make([]*recorder, 6)
	for i := range ps {
		recs[i] = newRecorder(string(rune('a'+i)), -1)
		ps[i] = recs[i]
	}
	recs[3].quota.Store(0)
	recs[3].limit = 0
	g := mustGuard(t, sluice.With(ps...), sluice.WithShadow("d"), sluice.WithObserver(&events{}))
	require.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))
	assert.Empty(t, recs[3].doneCalls())
	for i, r := range recs {
		if i != 3 {
			assert.Len(t, r.doneCalls(), 1, i)
		}
	}
	assert.Equal(t, uint64(1), g.Stats().Policies[3].ShadowRejected)

	boom := errors.New("boom")
	err := g.Do(t.Context(), func(context.Context) error { return boom })
	require.ErrorIs(t, err, boom)
	assert.Equal(t, sluice.Failure, recs[5].doneCalls()[1].outcome)
}

// Only the first 64 policies of a chain can be shadowed: shadowing the
// whole Guard of a longer chain is refused, not a shadow that leaves the
// 65th enforcing while Stats says the Guard is shadowed.
func TestWholeGuardShadowRefusedPastThe64thPolicy(t *testing.T) {
	ps := make([]sluice.Policy, 65)
	for i := range ps {
		ps[i] = newRecorder("p"+strconv.Itoa(i), -1)
	}
	_, err := sluice.New(sluice.With(ps...), sluice.WithShadow(""))
	assert.ErrorContains(t, err, "only the first 64 can be shadowed")
	g, err := sluice.New(sluice.With(ps...))
	require.NoError(t, err)
	assert.ErrorContains(t, g.SetShadow("", true), "only the first 64 can be shadowed")
	assert.False(t, g.Stats().Shadowed)
	require.NoError(t, g.SetShadow("", false))
}

// A shadowed policy that may wait makes no call wait: fifteen calls through
// a shadowed shaper of one a second that may wait 10 s take no time, and
// the four that enforcement would reject (past its wait) count as its
// rejections; a call that finds a shadowed bulkhead full goes on at once
// instead of waiting in its queue, counted as one it rejected.
func TestAShadowedPolicyThatWaitsMakesNoCallWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sh, err := ratelimit.NewShaper(ratelimit.PerSecond(1), 10*time.Second, ratelimit.WithName("shape"))
		require.NoError(t, err)
		g, err := sluice.New(sluice.With(sh), sluice.WithClock(monoclock.New()), sluice.WithShadow("shape"), sluice.WithObserver(&events{}))
		require.NoError(t, err)
		start := time.Now()
		for range 15 {
			require.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))
		}
		assert.Zero(t, time.Since(start), "the shadowed shaper made the calls wait")
		assert.Equal(t, uint64(4), g.Stats().Policies[0].ShadowRejected, "what enforcement rejects")

		bh, err := adaptive.NewBulkhead(1, adaptive.WithQueue(4, 10*time.Second))
		require.NoError(t, err)
		g, err = sluice.New(sluice.With(bh), sluice.WithClock(monoclock.New()), sluice.WithShadow(""), sluice.WithObserver(&events{}))
		require.NoError(t, err)
		hold, held := make(chan struct{}), make(chan struct{})
		go func() {
			_ = g.Do(context.Background(), func(context.Context) error { close(held); <-hold; return nil })
		}()
		<-held
		start = time.Now()
		require.NoError(t, g.Do(t.Context(), func(context.Context) error { return nil }))
		assert.Zero(t, time.Since(start), "the shadowed bulkhead queued the call")
		close(hold)
		synctest.Wait()
		assert.Equal(t, uint64(1), g.Stats().Policies[0].ShadowRejected)
	})
}

// A bulkhead with a queue, shadowed, is asked without waiting and
// "rejects" the call it would have queued; SetShadow(off) lands while its
// Admit runs (here from its own state listener, the instant an operator
// could). The call decides with the mode it found: it runs, shadowed, and
// is not refused by an answer given in shadow mode.
func TestAShadowModeTurnedOffDuringAWaitingAdmitDoesNotReject(t *testing.T) {
	bh, err := adaptive.NewBulkhead(1, adaptive.WithQueue(4, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	g, err := sluice.New(sluice.With(bh), sluice.WithShadow("adaptive/bulkhead"))
	if err != nil {
		t.Fatal(err)
	}
	var hold sluice.Call
	if err := g.Begin(context.Background(), &hold); err != nil {
		t.Fatal(err)
	}
	defer hold.End(nil)
	unsub := bh.Subscribe(func(c sluice.StateChange) {
		if c.To == adaptive.StateShedding {
			_ = g.SetShadow("adaptive/bulkhead", false)
		}
	})
	defer unsub()
	ran := false
	err = g.Do(context.Background(), func(context.Context) error { ran = true; return nil })
	if errors.Is(err, sluice.ErrRejected) || !ran {
		t.Fatalf("a call that began with the bulkhead in shadow mode was rejected by it: %v", err)
	}
}

// A shadowed limiter's quota is not the call's: its Decision (what the
// adapters send as the RateLimit fields) is the enforcing limiter's, in a
// short chain and in one long enough for the slow path.
func TestAShadowedPolicysQuotaIsNotTheCalls(t *testing.T) {
	for _, extra := range []int{0, 6} {
		watched, err := ratelimit.NewFixedWindow(3, time.Minute, ratelimit.WithName("watched"))
		require.NoError(t, err)
		enforced, err := ratelimit.NewFixedWindow(100, time.Minute, ratelimit.WithName("enforced"))
		require.NoError(t, err)
		ps := []sluice.Policy{watched, enforced}
		for i := range extra {
			ps = append(ps, newRecorder("r"+strconv.Itoa(i), -1))
		}
		g := mustGuard(t, sluice.With(ps...), sluice.WithShadow("watched"))
		for i := range 4 {
			var call sluice.Call
			require.NoError(t, g.Begin(t.Context(), &call))
			d := call.Decision()
			require.NoError(t, call.End(nil))
			assert.Equal(t, "enforced", d.Policy, "chain of %d, call %d", len(ps), i)
			assert.Equal(t, int64(100), d.Limit, "chain of %d, call %d", len(ps), i)
			assert.Equal(t, int64(99-i), d.Remaining, "chain of %d, call %d", len(ps), i)
		}
	}
}

// A Guard in shadow mode as a whole cuts no call short with its timeout.
func TestAShadowedGuardSetsNoDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGuard(t, sluice.WithTimeout(50*time.Millisecond), sluice.WithShadow(""))
		slow := func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
				return nil
			}
		}
		require.NoError(t, g.Do(t.Context(), slow))
		require.NoError(t, g.SetShadow("", false))
		require.ErrorIs(t, g.Do(t.Context(), slow), sluice.ErrTimeout, "enforcing again: the deadline is back")
	})
}

// namedNop admits every call, under the name x.
type namedNop struct{ _ byte }

func (*namedNop) Name() string { return "x" }
func (*namedNop) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 1, sluice.Quota{Limit: -1}, nil
}
func (*namedNop) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (*namedNop) Needs() sluice.Needs                                              { return 0 }

// Only a Guard in shadow mode as a whole (SetShadow("")) sets no deadline:
// one whose 64 policies are all shadowed by name keeps it.
func TestSixtyFourPoliciesShadowedByNameKeepTheTimeout(t *testing.T) {
	ps := make([]sluice.Policy, 64)
	for i := range ps {
		ps[i] = &namedNop{}
	}
	g, err := sluice.New(sluice.With(ps...), sluice.WithTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.SetShadow("x", true); err != nil {
		t.Fatal(err)
	}
	var c sluice.Call
	if err := g.Begin(context.Background(), &c); err != nil {
		t.Fatal(err)
	}
	defer c.End(nil)
	if _, ok := c.Context().Deadline(); !ok {
		t.Fatal("a Guard with its 64 policies shadowed by name (not SetShadow(\"\")) set no deadline")
	}
}
