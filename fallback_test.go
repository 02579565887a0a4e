package sluice_test

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
	"github.com/sluice-go/sluice/internal/fallbackof"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/timeouterr"
)

// fbPolicy admits, or rejects with its cause, and records the outcomes it is
// told of.
type fbPolicy struct {
	name  string
	cause error // nil: admit

	mu       sync.Mutex
	outcomes []sluice.Outcome
}

func (p *fbPolicy) Name() string { return p.name }

func (p *fbPolicy) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if p.cause == nil {
		return 0, sluice.Quota{Limit: -1}, nil
	}
	return 0, sluice.Quota{Limit: -1, RetryAfter: time.Second}, p.cause
}

func (p *fbPolicy) Needs() sluice.Needs { return 0 }

func (p *fbPolicy) Done(_ sluice.Ticket, o sluice.Outcome, _, _ time.Duration) {
	p.mu.Lock()
	p.outcomes = append(p.outcomes, o)
	p.mu.Unlock()
}

func (p *fbPolicy) seen() []sluice.Outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sluice.Outcome(nil), p.outcomes...)
}

// fbFunc is a FallbackOf[T] answering every error with its function; a nil
// function passes every error on.
type fbFunc[T any] struct {
	name string
	fn   func(ctx context.Context, err error) (T, error)
}

func (f fbFunc[T]) AnswerValue(ctx context.Context, err error) (T, string, error) {
	if f.fn == nil {
		var zero T
		return zero, "", err
	}
	v, out := f.fn(ctx, err)
	return v, f.name, out
}

func (f fbFunc[T]) Declared(context.Context, error) (string, bool) {
	return f.name, f.fn != nil
}

func (f fbFunc[T]) Answer(ctx context.Context, err error) (string, error) {
	_, name, out := f.AnswerValue(ctx, err)
	return name, out
}

func fbValue[T any](name string, v T) fbFunc[T] {
	return fbFunc[T]{name: name, fn: func(context.Context, error) (T, error) { return v, nil }}
}

type fbEvents struct {
	mu  sync.Mutex
	evs []sluice.FallbackEvent
}

func (e *fbEvents) record(_ context.Context, ev sluice.FallbackEvent) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *fbEvents) all() []sluice.FallbackEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]sluice.FallbackEvent(nil), e.evs...)
}

func fbGuard(t testing.TB, opts ...sluice.Option) *sluice.Guard {
	t.Helper()
	g, err := sluice.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

var errFallbackCall = errors.New("boom")

func TestFallbackAnswersEachRejectionCause(t *testing.T) {
	for _, cause := range []error{sluice.ErrRateLimited, sluice.ErrCircuitOpen, sluice.ErrOverloaded,
		sluice.ErrConcurrencyLimited, sluice.ErrTimeout} {
		t.Run(sluice.CauseOf(cause).String(), func(t *testing.T) {
			outer := &fbPolicy{name: "outer"}
			rej := &fbPolicy{name: "inner", cause: cause}
			var evs fbEvents
			g := fbGuard(t, sluice.With(outer, rej), sluice.OnFallback(evs.record),
				sluice.WithFallback(fbValue("static", "cached")))

			v, err := sluice.Execute(context.Background(), g, func(context.Context) (string, error) {
				t.Fatal("the call ran despite the rejection")
				return "", nil
			})
			require.NoError(t, err)
			assert.Equal(t, "cached", v)
			assert.Equal(t, []sluice.Outcome{sluice.Released}, outer.seen(), "the outer policy gives back what it took")

			evl := evs.all()
			require.Len(t, evl, 1)
			assert.Equal(t, "static", evl[0].Fallback)
			assert.Equal(t, sluice.CauseOf(cause), evl[0].Cause)
			assert.Equal(t, "inner", evl[0].Policy)
			assert.ErrorIs(t, evl[0].Err, sluice.ErrRejected)
			assert.ErrorIs(t, evl[0].Err, cause)
		})
	}
}

func TestFallbackAnswersFailureAfterPoliciesCountIt(t *testing.T) {
	p := &fbPolicy{name: "breaker"}
	var evs fbEvents
	g := fbGuard(t, sluice.With(p), sluice.OnFallback(evs.record),
		sluice.WithFallback(fbValue("default", 7)))

	v, err := sluice.Execute(context.Background(), g, func(context.Context) (int, error) { return 1, errFallbackCall })
	require.NoError(t, err)
	assert.Equal(t, 7, v)
	assert.Equal(t, []sluice.Outcome{sluice.Failure}, p.seen(), "the policy counts the failure the fallback hides")
	require.Len(t, evs.all(), 1)
	ev := evs.all()[0]
	assert.Equal(t, sluice.FallbackEvent{Fallback: "default", Cause: sluice.CauseNone, Err: errFallbackCall}, ev)
}

func TestFallbackIsNotAskedOnSuccess(t *testing.T) {
	called := false
	var evs fbEvents
	g := fbGuard(t, sluice.With(&fbPolicy{name: "p"}), sluice.OnFallback(evs.record),
		sluice.WithFallback(fbFunc[int]{name: "f", fn: func(context.Context, error) (int, error) {
			called = true
			return 0, nil
		}}))
	v, err := sluice.Execute(context.Background(), g, func(context.Context) (int, error) { return 3, nil })
	require.NoError(t, err)
	assert.Equal(t, 3, v)
	require.NoError(t, g.Do(context.Background(), func(context.Context) error { return nil }))
	assert.False(t, called)
	assert.Empty(t, evs.all())
}

func TestFallbackThatDeclinesReturnsTheOriginalError(t *testing.T) {
	p := &fbPolicy{name: "limiter", cause: sluice.ErrRateLimited}
	var evs fbEvents
	decline := fbFunc[string]{name: "picky", fn: func(_ context.Context, err error) (string, error) { return "", err }}
	next := fbValue("next", "never")
	g := fbGuard(t, sluice.With(p), sluice.OnFallback(evs.record), sluice.WithFallback(decline, next))

	_, err := sluice.Execute(context.Background(), g, func(context.Context) (string, error) { return "x", nil })
	assert.Equal(t, "limiter", rejection(t, err).Policy)
	assert.Empty(t, evs.all(), "a declining fallback is not reported as served, and the next one is not asked")

	err = g.Do(context.Background(), func(context.Context) error { return nil })
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
}

func TestFallbackCanReplaceTheError(t *testing.T) {
	errShown := errors.New("try later")
	g := fbGuard(t, sluice.With(&fbPolicy{name: "p", cause: sluice.ErrOverloaded}),
		sluice.WithFallback(fbFunc[int]{name: "f", fn: func(context.Context, error) (int, error) { return 0, errShown }}))
	_, err := sluice.Execute(context.Background(), g, func(context.Context) (int, error) { return 1, nil })
	assert.Same(t, errShown, err)
}

func TestFallbackWithoutDeclarationPassesToTheNext(t *testing.T) {
	var evs fbEvents
	g := fbGuard(t, sluice.With(&fbPolicy{name: "p"}), sluice.OnFallback(evs.record),
		sluice.WithFallback(fbFunc[string]{name: "empty"}),
		sluice.WithFallback(fbValue("second", "two")))
	v, err := sluice.Execute(context.Background(), g, func(context.Context) (string, error) { return "", errFallbackCall })
	require.NoError(t, err)
	assert.Equal(t, "two", v)
	require.Len(t, evs.all(), 1)
	assert.Equal(t, "second", evs.all()[0].Fallback)
}

func TestExecuteAsksOnlyFallbacksOfItsType(t *testing.T) {
	var evs fbEvents
	g := fbGuard(t, sluice.With(&fbPolicy{name: "p"}), sluice.OnFallback(evs.record),
		sluice.WithFallback(fbFunc[int]{name: "no ints"}, fbValue("strings", "s")))

	s, err := sluice.Execute(context.Background(), g, func(context.Context) (string, error) { return "", errFallbackCall })
	require.NoError(t, err)
	assert.Equal(t, "s", s, "a fallback of another type without an answer is passed over")

	g2 := fbGuard(t, sluice.With(&fbPolicy{name: "p"}), sluice.WithFallback(fbFunc[int]{name: "no ints"}))
	f, err := sluice.Execute(context.Background(), g2, func(context.Context) (float64, error) { return 1.5, errFallbackCall })
	assert.Same(t, errFallbackCall, err, "no fallback answers: the error goes to the caller")
	assert.Equal(t, 1.5, f, "with the call's own value")
	require.Len(t, evs.all(), 1)
}

// A fallback of another type than Execute's with an answer for the error,
// when none of Execute's type has one, is a mistake in the Guard's
// declaration: Execute reports it, wrapping the error, with the call's own
// value, and no observer hears of an answer. The other type's answer is not
// run.
func TestExecuteWithAFallbackOfAnotherTypeIsAnError(t *testing.T) {
	var evs fbEvents
	ran := false
	ints := fbFunc[int]{name: "ints", fn: func(context.Context, error) (int, error) { ran = true; return 42, nil }}
	g := fbGuard(t, sluice.With(&fbPolicy{name: "p"}), sluice.OnFallback(evs.record),
		sluice.WithFallback(ints, fbFunc[string]{name: "no strings"}))

	s, err := sluice.Execute(context.Background(), g, func(context.Context) (string, error) { return "own", errFallbackCall })
	require.Error(t, err)
	assert.ErrorIs(t, err, errFallbackCall)
	assert.ErrorContains(t, err, `"ints"`)
	assert.ErrorContains(t, err, "answering string")
	assert.Equal(t, "own", s)
	assert.False(t, ran, "the other type's answer ran")

	rej := fbGuard(t, sluice.With(&fbPolicy{name: "limiter", cause: sluice.ErrRateLimited}), sluice.OnFallback(evs.record),
		sluice.WithFallback(fbValue("ints", 42)))
	_, err = sluice.Execute(context.Background(), rej, func(context.Context) (string, error) {
		t.Fatal("the call ran despite the rejection")
		return "", nil
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
	assert.ErrorContains(t, err, `"ints"`)
	assert.Empty(t, evs.all())

	// Do keeps only the error: any fallback's answer stands.
	require.NoError(t, rej.Do(context.Background(), func(context.Context) error { return nil }))
	require.Len(t, evs.all(), 1)
}

// Execute takes the answer of the fallback of its type that declares one,
// wherever it stands among fallbacks of other types with answers too: those
// serve other entry points of the same Guard.
func TestExecuteTakesTheFallbackOfItsType(t *testing.T) {
	var evs fbEvents
	g := fbGuard(t, sluice.With(&fbPolicy{name: "p"}), sluice.OnFallback(evs.record),
		sluice.WithFallback(fbValue("ints", 42), fbValue("strings", "s")))

	s, err := sluice.Execute(context.Background(), g, func(context.Context) (string, error) { return "own", errFallbackCall })
	require.NoError(t, err)
	assert.Equal(t, "s", s)
	n, err := sluice.Execute(context.Background(), g, func(context.Context) (int, error) { return 0, errFallbackCall })
	require.NoError(t, err)
	assert.Equal(t, 42, n)
	require.Len(t, evs.all(), 2)
	assert.Equal(t, "strings", evs.all()[0].Fallback)
	assert.Equal(t, "ints", evs.all()[1].Fallback)

	// fallbackof.Value is the same layer, for adapters.
	v, err := fallbackof.Value[string](context.Background(), g, errFallbackCall)
	require.NoError(t, err)
	assert.Equal(t, "s", v)
	_, err = fallbackof.Value[float64](context.Background(), g, errFallbackCall)
	assert.ErrorIs(t, err, errFallbackCall)
	assert.ErrorContains(t, err, "answering float64")
	_, err = fallbackof.Value[string](context.Background(), nil, errFallbackCall)
	assert.Same(t, errFallbackCall, err, "a nil Guard has no fallback")
	assert.Len(t, guardhook.Fallbacks(g).([]sluice.Fallback), 2)
}

func TestDoKeepsOnlyTheFallbacksError(t *testing.T) {
	p := &fbPolicy{name: "p"}
	var evs fbEvents
	g := fbGuard(t, sluice.With(p), sluice.OnFallback(evs.record), sluice.WithFallback(fbValue("swallow", 0)))
	require.NoError(t, g.Do(context.Background(), func(context.Context) error { return errFallbackCall }))
	assert.Equal(t, []sluice.Outcome{sluice.Failure}, p.seen())
	require.Len(t, evs.all(), 1)
	assert.Equal(t, "swallow", evs.all()[0].Fallback)
}

func TestFallbackPanicIsNotSwallowed(t *testing.T) {
	p := &fbPolicy{name: "p"}
	g := fbGuard(t, sluice.With(p), sluice.WithFallback(fbFunc[int]{name: "bad", fn: func(context.Context, error) (int, error) {
		panic("fallback broke")
	}}))
	assert.PanicsWithValue(t, "fallback broke", func() {
		_, _ = sluice.Execute(context.Background(), g, func(context.Context) (int, error) { return 0, errFallbackCall })
	})
	assert.PanicsWithValue(t, "fallback broke", func() {
		_ = g.Do(context.Background(), func(context.Context) error { return errFallbackCall })
	})
	assert.Equal(t, []sluice.Outcome{sluice.Failure, sluice.Failure}, p.seen(), "each call is reported once")
}

func TestCallPanicSkipsTheFallback(t *testing.T) {
	p := &fbPolicy{name: "p"}
	called := false
	g := fbGuard(t, sluice.With(p), sluice.WithFallback(fbFunc[int]{name: "f", fn: func(context.Context, error) (int, error) {
		called = true
		return 0, nil
	}}))
	assert.PanicsWithValue(t, "call broke", func() {
		_, _ = sluice.Execute(context.Background(), g, func(context.Context) (int, error) { panic("call broke") })
	})
	assert.False(t, called)
	assert.Equal(t, []sluice.Outcome{sluice.Failure}, p.seen())
}

// End of a rejected call applies the Guard's fallbacks, as Do does; so does
// End of an admitted call that failed, after the policies counted it.
func TestCallEndAppliesTheFallbacks(t *testing.T) {
	var evs fbEvents
	g := fbGuard(t, sluice.With(&fbPolicy{name: "p", cause: sluice.ErrCircuitOpen}), sluice.OnFallback(evs.record),
		sluice.WithFallback(fbValue("page", "maintenance page")))
	var c sluice.Call
	err := g.Begin(context.Background(), &c)
	require.ErrorIs(t, err, sluice.ErrCircuitOpen)
	assert.False(t, c.Decision().Allowed)
	assert.NoError(t, c.End(err))
	require.Len(t, evs.all(), 1)
	assert.Equal(t, sluice.CauseCircuitOpen, evs.all()[0].Cause)
	assert.Equal(t, "p", evs.all()[0].Policy)
	assert.Same(t, err, evs.all()[0].Err)

	p := &fbPolicy{name: "breaker"}
	g2 := fbGuard(t, sluice.With(p), sluice.OnFallback(evs.record), sluice.WithFallback(fbValue("page", "maintenance page")))
	err = g2.Begin(context.Background(), &c)
	require.NoError(t, err)
	assert.NoError(t, c.End(errFallbackCall))
	assert.Equal(t, []sluice.Outcome{sluice.Failure}, p.seen())
	require.Len(t, evs.all(), 2)
	assert.Equal(t, sluice.FallbackEvent{Fallback: "page", Cause: sluice.CauseNone, Err: errFallbackCall}, evs.all()[1])
	assert.NoError(t, c.End(nil))
	assert.NoError(t, c.End(errFallbackCall), "a second End still applies the fallbacks")
	assert.Equal(t, []sluice.Outcome{sluice.Failure}, p.seen(), "and reports nothing")

	plain := fbGuard(t)
	err = plain.Begin(context.Background(), &c)
	require.NoError(t, err)
	assert.Same(t, errFallbackCall, c.End(errFallbackCall))
	var nilGuard *sluice.Guard
	err = nilGuard.Begin(context.Background(), &c)
	require.NoError(t, err)
	assert.Same(t, errFallbackCall, c.End(errFallbackCall))
}

func TestFallbackOptionsValidate(t *testing.T) {
	_, err := sluice.New(sluice.WithFallback(nil))
	assert.ErrorContains(t, err, "WithFallback")
	_, err = sluice.New(sluice.OnFallback(nil))
	assert.ErrorContains(t, err, "OnFallback")
}

func TestGuardWithFallbackAllocatesNothingOnSuccess(t *testing.T) {
	g := fbGuard(t, sluice.With(&fbPolicy{name: "a"}, &fbPolicy{name: "b"}),
		sluice.WithFallback(fbValue("f", 1)), sluice.OnFallback(func(context.Context, sluice.FallbackEvent) {}))
	// fbPolicy records outcomes; start from a roomy slice so recording does
	// not allocate.
	for _, p := range g.Policies() {
		p.(*fbPolicy).outcomes = make([]sluice.Outcome, 0, 1024)
	}
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	fnv := func(context.Context) (int, error) { return 1, nil }
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = g.Do(ctx, fn) }))
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = sluice.Execute(ctx, g, fnv) }))
}

// The event of a fallback's answer names the rejecting policy only for a
// rejection: a nested Guard's rejection that the call returned counts as
// one, a timeout wrapping it does not.
func TestFallbackEventFields(t *testing.T) {
	rej := sluice.Rejection(sluice.Decision{Policy: "breaker/db", Limit: -1, Cause: sluice.ErrCircuitOpen})
	te := &timeouterr.Error{After: time.Second, Err: rej}
	tests := []struct {
		err  error
		want sluice.FallbackEvent
	}{
		{rej, sluice.FallbackEvent{Fallback: "f", Cause: sluice.CauseCircuitOpen, Policy: "breaker/db", Err: rej}},
		{errFallbackCall, sluice.FallbackEvent{Fallback: "f", Cause: sluice.CauseNone, Err: errFallbackCall}},
		{context.DeadlineExceeded, sluice.FallbackEvent{Fallback: "f", Cause: sluice.CauseNone, Err: context.DeadlineExceeded}},
		{te, sluice.FallbackEvent{Fallback: "f", Cause: sluice.CauseTimeout, Err: te}},
	}
	for _, tt := range tests {
		var evs fbEvents
		g := fbGuard(t, sluice.OnFallback(evs.record), sluice.WithFallback(fbValue("f", 1)))
		require.NoError(t, g.Do(context.Background(), func(context.Context) error { return tt.err }))
		require.Len(t, evs.all(), 1)
		assert.Equal(t, tt.want, evs.all()[0])
	}
}

func TestRejectionOf(t *testing.T) {
	d := sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen}
	re := sluice.Rejection(d)
	for _, err := range []error{re, fmt.Errorf("calling dep: %w", re), errors.Join(errors.New("other"), re)} {
		got, ok := sluice.RejectionOf(err)
		assert.True(t, ok, "%v", err)
		assert.Equal(t, d, got)
	}
	for _, err := range []error{nil, errors.New("plain"), context.Canceled, &timeouterr.Error{After: time.Second, Err: re}} {
		_, ok := sluice.RejectionOf(err)
		assert.False(t, ok, "%v", err)
	}
}
