package degrade_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
)

func newStale(t testing.TB, maxAge time.Duration, maxEntries int, clock sluice.Clock) *degrade.Stale[string] {
	t.Helper()
	s, err := degrade.NewStale[string](maxAge, maxEntries, degrade.WithClock(clock))
	require.NoError(t, err)
	return s
}

func answer(v string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return v, nil }
}

func fail(context.Context) (string, error) { return "", errBoom }

func TestStaleServesTheLastGoodAnswerWithItsAge(t *testing.T) {
	clock := sluice.NewManualClock(0)
	s := newStale(t, time.Minute, 10, clock)
	var evs events
	// In the Guard's fallbacks, the Stale's answers reach its observers.
	g := newGuard(t, sluice.WithClock(clock), sluice.OnFallback(evs.record), sluice.WithFallback(s))
	ctx := context.Background()

	steps := []struct {
		at      time.Duration
		call    func(context.Context) (string, error)
		want    degrade.Result[string]
		wantErr bool
	}{
		{at: 0, call: fail, wantErr: true}, // nothing remembered yet
		{at: 1 * time.Second, call: answer("v1"), want: degrade.Result[string]{Value: "v1"}},
		{at: 6 * time.Second, call: fail, want: degrade.Result[string]{Value: "v1", Stale: true, Age: 5 * time.Second}},
		{at: 8 * time.Second, call: answer("v2"), want: degrade.Result[string]{Value: "v2"}},
		{at: 9500 * time.Millisecond, call: fail, want: degrade.Result[string]{Value: "v2", Stale: true, Age: 1500 * time.Millisecond}},
		{at: 68 * time.Second, call: fail, want: degrade.Result[string]{Value: "v2", Stale: true, Age: time.Minute}}, // exactly max age
		{at: 68*time.Second + 1, call: fail, wantErr: true},                                                          // older than max age
		{at: 69 * time.Second, call: fail, wantErr: true},                                                            // and forgotten
	}
	for i, st := range steps {
		clock.Set(st.at)
		r, err := s.Execute(ctx, g, "user:1", st.call)
		if st.wantErr {
			assert.ErrorIs(t, err, errBoom, "step %d", i)
			assert.False(t, r.Stale, "step %d", i)
			continue
		}
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, st.want, r, "step %d", i)
	}
	assert.Equal(t, 0, s.Len())
	evl := evs.all()
	require.Len(t, evl, 3)
	for _, ev := range evl {
		assert.Equal(t, "stale", ev.Fallback)
		assert.Equal(t, sluice.CauseNone, ev.Cause)
		assert.Same(t, errBoom, ev.Err)
	}
}

func TestStaleServesRejectedRequests(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	s := newStale(t, time.Minute, 10, clock)
	s.Put("k", "remembered")
	clock.Advance(3 * time.Second)
	var evs events
	br := openBreaker(t)
	g := newGuard(t, sluice.WithClock(clock), sluice.With(br), sluice.OnFallback(evs.record), sluice.WithFallback(s))
	r, err := s.Execute(context.Background(), g, "k", answer("fresh"))
	require.NoError(t, err)
	assert.Equal(t, degrade.Result[string]{Value: "remembered", Stale: true, Age: 3 * time.Second}, r)
	require.Len(t, evs.all(), 1)
	assert.Equal(t, sluice.CauseCircuitOpen, evs.all()[0].Cause)
	assert.Equal(t, br.Name(), evs.all()[0].Policy)

	_, err = s.Execute(context.Background(), g, "other", answer("fresh"))
	assert.ErrorIs(t, err, sluice.ErrCircuitOpen, "nothing remembered for the key")
}

func TestStaleKeepsAtMostMaxEntries(t *testing.T) {
	clock := sluice.NewManualClock(0)
	s := newStale(t, time.Hour, 3, clock)
	for i, k := range []string{"a", "b", "c"} {
		clock.Set(time.Duration(i) * time.Second)
		s.Put(k, k+"1")
	}
	clock.Set(10 * time.Second)
	s.Put("a", "a2") // rewritten: now the newest
	s.Put("d", "d1") // pushes out b, written longest ago
	assert.Equal(t, 3, s.Len())
	_, _, ok := s.Get("b")
	assert.False(t, ok)
	for k, want := range map[string]string{"a": "a2", "c": "c1", "d": "d1"} {
		v, _, ok := s.Get(k)
		assert.True(t, ok, k)
		assert.Equal(t, want, v)
	}
	s.Put("e", "e1") // pushes out c
	_, _, ok = s.Get("c")
	assert.False(t, ok)
	s.Delete("a")
	s.Delete("missing")
	assert.Equal(t, 2, s.Len())
	_, age, ok := s.Get("d")
	assert.True(t, ok)
	assert.Zero(t, age)
}

func TestStaleAnswersBeforeTheFallbacksListedAfterIt(t *testing.T) {
	clock := sluice.NewManualClock(0)
	s := newStale(t, time.Minute, 10, clock)
	def, err := degrade.New(degrade.OnError(degrade.Value("default")))
	require.NoError(t, err)
	var evs events
	g := newGuard(t, sluice.WithClock(clock), sluice.WithFallback(s, def), sluice.OnFallback(evs.record))
	ctx := context.Background()

	r, err := s.Execute(ctx, g, "k", fail)
	require.NoError(t, err)
	assert.Equal(t, degrade.Result[string]{Value: "default"}, r, "nothing stale: the default answers")

	_, err = s.Execute(ctx, g, "k", answer("good"))
	require.NoError(t, err)
	clock.Advance(2 * time.Second)
	r, err = s.Execute(ctx, g, "k", fail)
	require.NoError(t, err)
	assert.Equal(t, degrade.Result[string]{Value: "good", Stale: true, Age: 2 * time.Second}, r)

	evl := evs.all()
	require.Len(t, evl, 2)
	assert.Equal(t, "error", evl[0].Fallback)
	assert.Equal(t, "stale", evl[1].Fallback)

	// Outside Stale.Execute the Stale has no key and passes the error on.
	v, err := sluice.Execute(ctx, g, fail)
	require.NoError(t, err)
	assert.Equal(t, "default", v)
	name, err := s.Answer(ctx, errBoom)
	assert.Empty(t, name)
	assert.Same(t, errBoom, err)
	_, ok := s.Declared(ctx, errBoom)
	assert.False(t, ok, "outside Stale.Execute nothing is declared")
}

func TestStaleWithNilGuard(t *testing.T) {
	s := newStale(t, time.Minute, 1, sluice.NewManualClock(0))
	_, err := s.Execute(context.Background(), nil, "k", answer("v"))
	require.NoError(t, err)
	r, err := s.Execute(context.Background(), nil, "k", fail)
	require.NoError(t, err)
	assert.True(t, r.Stale)
	assert.Equal(t, "v", r.Value)
}

func TestStaleConcurrentUse(t *testing.T) {
	clock := sluice.NewManualClock(0)
	s := newStale(t, time.Minute, 8, clock)
	g := newGuard(t, sluice.WithClock(clock), sluice.With(&counter{}))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				key := fmt.Sprintf("k%d", (w+i)%12)
				clock.Advance(time.Millisecond)
				if i%3 == 0 {
					r, err := s.Execute(context.Background(), g, key, fail)
					if err == nil {
						assert.True(t, r.Stale)
						assert.Equal(t, key, r.Value)
						assert.LessOrEqual(t, r.Age, time.Minute)
					}
					continue
				}
				_, err := s.Execute(context.Background(), g, key, answer(key))
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, s.Len(), 8)
}

func TestNewStaleValidates(t *testing.T) {
	_, err := degrade.NewStale[int](0, 1)
	assert.ErrorContains(t, err, "max age")
	_, err = degrade.NewStale[int](time.Second, 0)
	assert.ErrorContains(t, err, "max entries")
	_, err = degrade.NewStale[int](time.Second, 1, degrade.WithClock(nil))
	assert.ErrorContains(t, err, "nil clock")
	_, err = degrade.NewStale[int](time.Second, 1, degrade.WithName(""))
	assert.ErrorContains(t, err, "empty name")
	_, err = degrade.NewStale[int](time.Hour, 1, degrade.WithName("price-cache"), nil)
	assert.ErrorContains(t, err, "option 1 is nil")
	s, err := degrade.NewStale[int](time.Hour, 1, degrade.WithName("price-cache"))
	require.NoError(t, err)
	s.Put("k", 1)
	var evs events
	g := newGuard(t, sluice.OnFallback(evs.record), sluice.WithFallback(s))
	r, err := s.Execute(context.Background(), g, "k", func(context.Context) (int, error) { return 0, errBoom })
	require.NoError(t, err)
	assert.Equal(t, 1, r.Value)
	assert.True(t, r.Stale)
	require.Len(t, evs.all(), 1)
	assert.Equal(t, "price-cache", evs.all()[0].Fallback)

	// Outside the Guard's fallbacks, Execute still serves the stale answer,
	// but the Guard's observers do not hear of it.
	var quiet events
	g = newGuard(t, sluice.OnFallback(quiet.record))
	r, err = s.Execute(context.Background(), g, "k", func(context.Context) (int, error) { return 0, errBoom })
	require.NoError(t, err)
	assert.Equal(t, 1, r.Value)
	assert.True(t, r.Stale)
	assert.Empty(t, quiet.all())
}

// A sub-call made inside Stale.Execute's fn through a Guard that lists the
// Stale is "a call not run by Execute": it must get no stale answer, and the
// outer call's own fresh answer must not be reported stale.
func TestStaleKeyStaysOutOfNestedCalls(t *testing.T) {
	clock := sluice.NewManualClock(0)
	s := newStale(t, time.Minute, 10, clock)
	g := newGuard(t, sluice.WithClock(clock), sluice.WithFallback(s))
	ctx := context.Background()
	_, err := s.Execute(ctx, g, "profile:1", answer("profile v1"))
	require.NoError(t, err)
	clock.Advance(2 * time.Second)

	var inner string
	var innerErr error
	r, err := s.Execute(ctx, g, "profile:1", func(ctx context.Context) (string, error) {
		inner, innerErr = sluice.Execute(ctx, g, fail) // e.g. the avatar, through the same Guard
		return "profile v2", nil
	})
	require.NoError(t, err)
	assert.ErrorIs(t, innerErr, errBoom, "the sub-call was not run by Stale.Execute")
	assert.Empty(t, inner, "the sub-call got another key's stale answer")
	assert.Equal(t, degrade.Result[string]{Value: "profile v2"}, r, "a fresh answer reported as stale")
}

// A sub-call's failure inside fn is not answered from the outer key's copy,
// so no stale answer comes back as fn's own and is remembered as fresh, to be
// served past its maximum age.
func TestStaleAnswerIsNotRememberedAsFresh(t *testing.T) {
	clock := sluice.NewManualClock(0)
	s := newStale(t, time.Minute, 10, clock)
	g := newGuard(t, sluice.WithClock(clock), sluice.WithFallback(s))
	ctx := context.Background()
	_, err := s.Execute(ctx, g, "k", answer("v1")) // v1 is the call's own at 0s
	require.NoError(t, err)

	clock.Set(50 * time.Second)
	_, _ = s.Execute(ctx, g, "k", func(ctx context.Context) (string, error) {
		return sluice.Execute(ctx, g, fail) // fails; answered from the Stale
	})

	clock.Set(90 * time.Second) // v1 is 90s old, past the 1m maximum age
	r, err := s.Execute(ctx, g, "k", fail)
	assert.ErrorIs(t, err, errBoom, "v1 is older than the maximum age, got %+v", r)
}

// Sub-calls that fn runs concurrently share nothing of the outer call's
// (-race watches).
func TestStaleConcurrentSubCalls(t *testing.T) {
	clock := sluice.NewManualClock(0)
	s := newStale(t, time.Minute, 10, clock)
	g := newGuard(t, sluice.WithClock(clock), sluice.WithFallback(s))
	ctx := context.Background()
	s.Put("k", "v")
	_, _ = s.Execute(ctx, g, "k", func(ctx context.Context) (string, error) {
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = sluice.Execute(ctx, g, fail)
			}()
		}
		wg.Wait()
		return "fresh", nil
	})
}

// WithFallback refuses a nil pointer (the *Fallbacks a failed degrade.New
// returns) as it refuses nil, instead of panicking on the first error.
func TestWithFallbackRefusesANilPointer(t *testing.T) {
	fb, err := degrade.New[string]() // no rule: fails, fb is a nil *Fallbacks
	require.Error(t, err)
	g, err := sluice.New(sluice.WithFallback(fb))
	if err == nil {
		assert.NotPanics(t, func() { _, _ = sluice.Execute(context.Background(), g, fail) })
	}
	assert.Error(t, err, "a nil *degrade.Fallbacks is no fallback, as a nil *breaker.Breaker is no policy")
}

// Stale.Execute allocates once a call, the hidden-key context included.
func TestStaleExecuteAllocatesOnce(t *testing.T) {
	s, err := degrade.NewStale[int](time.Minute, 16)
	require.NoError(t, err)
	g, err := sluice.New()
	require.NoError(t, err)
	ctx := context.Background()
	fn := func(context.Context) (int, error) { return 1, nil }
	assert.LessOrEqual(t, testing.AllocsPerRun(200, func() { _, _ = s.Execute(ctx, g, "k", fn) }), 1.0)
}

// A Switch is named by NewSwitch's argument: WithName, which names a
// Stale, is an error there rather than ignored.
func TestWithNameOnASwitchIsAnError(t *testing.T) {
	_, err := degrade.NewSwitch("s", degrade.WithName("other"))
	require.Error(t, err)
	_, err = degrade.NewStale[int](time.Hour, 1, degrade.WithName("a"), degrade.WithName("b"))
	require.Error(t, err)
}

// function as an error without running the chain: no policy hears of it.
func TestStaleExecuteNilFunctionIsAnError(t *testing.T) {
	c := &counter{}
	g := newGuard(t, sluice.With(c))
	s := newStale(t, time.Minute, 10, sluice.NewManualClock(0))
	for name, gg := range map[string]*sluice.Guard{"guard": g, "nil guard": nil} {
		var err error
		assert.NotPanics(t, func() {
			_, err = s.Execute(context.Background(), gg, "k", nil)
		}, name)
		assert.Error(t, err, name)
	}
	assert.Zero(t, c.count(sluice.Failure), "a nil function is no failure of the protected call")
}

// panic on it).
func TestStaleExecuteNilContextIsAnError(t *testing.T) {
	g := newGuard(t, sluice.WithTimeout(time.Second))
	s := newStale(t, time.Minute, 10, sluice.NewManualClock(0))
	var nilCtx context.Context
	var err error
	assert.NotPanics(t, func() {
		_, err = s.Execute(nilCtx, g, "k", answer("v"))
	})
	assert.Error(t, err)
}

// stale answer after the Guard's layer that its observers never hear of.
func TestStaleInFallbacksLeavesADeclineBeforeIt(t *testing.T) {
	clock := sluice.NewManualClock(0)
	s := newStale(t, time.Minute, 10, clock)
	errQuota := errors.New("quota spent: upgrade your plan")
	decliner, err := degrade.New(degrade.OnRateLimited(func(context.Context, error) (string, error) {
		return "", errQuota
	}))
	require.NoError(t, err)
	var evs events
	g := newGuard(t, sluice.WithClock(clock), sluice.With(rateLimiter(t)),
		sluice.WithFallback(decliner, s), sluice.OnFallback(evs.record))
	s.Put("k", "remembered")
	clock.Advance(time.Second)
	r, err := s.Execute(context.Background(), g, "k", answer("fresh"))
	assert.ErrorIs(t, err, errQuota)
	assert.False(t, r.Stale)
	assert.Empty(t, evs.all())
}
