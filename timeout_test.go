package sluice_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/timeouterr"
)

// fbWaitCtx is a call that honours its context: it returns ctx's error when
// ctx is done, or ok after d.
func fbWaitCtx(d time.Duration) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(d):
			return "ok", nil
		}
	}
}

func TestTimeoutCancelsTheCallAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fbPolicy{name: "breaker"}
		g := fbGuard(t, sluice.With(p), sluice.WithTimeout(100*time.Millisecond))
		start := time.Now()
		var ranFor time.Duration
		var cause error
		_, err := sluice.Execute(context.Background(), g, func(ctx context.Context) (int, error) {
			dl, ok := ctx.Deadline()
			require.True(t, ok)
			assert.Equal(t, start.Add(100*time.Millisecond), dl)
			<-ctx.Done()
			ranFor = time.Since(start)
			cause = context.Cause(ctx)
			return 0, ctx.Err()
		})
		assert.Equal(t, 100*time.Millisecond, ranFor, "the call's context is cancelled at the deadline")
		assert.ErrorIs(t, cause, sluice.ErrTimeout)
		assert.ErrorIs(t, err, sluice.ErrTimeout)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, sluice.CauseTimeout, sluice.CauseOf(err))
		assert.NotErrorIs(t, err, sluice.ErrRejected)
		var te *timeouterr.Error
		require.ErrorAs(t, err, &te)
		assert.Equal(t, 100*time.Millisecond, te.After)
		assert.True(t, te.Timeout())
		assert.Equal(t, "sluice: timeout after 100ms", err.Error())
		assert.Equal(t, []sluice.Outcome{sluice.Failure}, p.seen(), "breakers count a timeout as a failure")
	})
}

func TestTimeoutKeepsAnEarlierCallerDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fbPolicy{name: "breaker"}
		g := fbGuard(t, sluice.With(p), sluice.WithTimeout(time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		callerDL, _ := ctx.Deadline()
		start := time.Now()
		_, err := sluice.Execute(ctx, g, func(ctx context.Context) (string, error) {
			dl, ok := ctx.Deadline()
			require.True(t, ok)
			assert.Equal(t, callerDL, dl, "the call runs under the caller's earlier deadline")
			return fbWaitCtx(time.Hour)(ctx)
		})
		assert.Equal(t, 50*time.Millisecond, time.Since(start))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, sluice.ErrTimeout, "the expiry is the caller's, not the Guard's")
		var te *timeouterr.Error
		assert.False(t, errors.As(err, &te))
	})
}

func TestTimeoutShorterThanTheCallerDeadlineWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := fbGuard(t, sluice.WithTimeout(30*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err := g.Do(ctx, func(ctx context.Context) error {
			_, err := fbWaitCtx(time.Hour)(ctx)
			return err
		})
		assert.Equal(t, 30*time.Millisecond, time.Since(start))
		assert.ErrorIs(t, err, sluice.ErrTimeout)
		assert.NoError(t, ctx.Err(), "the caller's context is untouched")
	})
}

func TestTimeoutOutcomes(t *testing.T) {
	errDB := errors.New("db: connection reset")
	tests := []struct {
		name    string
		fn      func(context.Context) (string, error)
		cancel  time.Duration // the caller cancels after this; 0: never
		want    string
		wantErr []error
		notErr  []error
		outcome sluice.Outcome
	}{
		{name: "in time", fn: fbWaitCtx(10 * time.Millisecond), want: "ok", outcome: sluice.Success},
		{
			name: "late success stands",
			fn: func(ctx context.Context) (string, error) {
				time.Sleep(200 * time.Millisecond) // ignores ctx
				return "late", nil
			},
			want: "late", outcome: sluice.Success,
		},
		{
			name: "own error after the deadline is a timeout",
			fn: func(ctx context.Context) (string, error) {
				<-ctx.Done()
				return "", errDB
			},
			wantErr: []error{sluice.ErrTimeout, context.DeadlineExceeded, errDB}, outcome: sluice.Failure,
		},
		{
			name: "own error before the deadline is not",
			fn: func(ctx context.Context) (string, error) {
				return "", errDB
			},
			wantErr: []error{errDB}, notErr: []error{sluice.ErrTimeout}, outcome: sluice.Failure,
		},
		{
			name: "caller cancels",
			fn: func(ctx context.Context) (string, error) {
				<-ctx.Done()
				return "", ctx.Err()
			},
			cancel:  20 * time.Millisecond,
			wantErr: []error{context.Canceled}, notErr: []error{sluice.ErrTimeout}, outcome: sluice.Ignored,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &fbPolicy{name: "p"}
				g := fbGuard(t, sluice.With(p), sluice.WithTimeout(100*time.Millisecond))
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tt.cancel > 0 {
					time.AfterFunc(tt.cancel, cancel)
				}
				v, err := sluice.Execute(ctx, g, tt.fn)
				if len(tt.wantErr) == 0 {
					require.NoError(t, err)
					assert.Equal(t, tt.want, v)
				}
				for _, e := range tt.wantErr {
					assert.ErrorIs(t, err, e)
				}
				for _, e := range tt.notErr {
					assert.NotErrorIs(t, err, e)
				}
				assert.Equal(t, []sluice.Outcome{tt.outcome}, p.seen())
			})
		})
	}
}

func TestTimeoutIsCaughtByAFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fbPolicy{name: "breaker"}
		var evs fbEvents
		onTimeout := fbFunc[string]{name: "timeout", fn: func(_ context.Context, err error) (string, error) {
			if sluice.CauseOf(err) == sluice.CauseTimeout {
				return "partial", nil
			}
			return "", err
		}}
		g := fbGuard(t, sluice.With(p), sluice.WithTimeout(50*time.Millisecond),
			sluice.WithFallback(onTimeout), sluice.OnFallback(evs.record))
		v, err := sluice.Execute(context.Background(), g, fbWaitCtx(time.Hour))
		require.NoError(t, err)
		assert.Equal(t, "partial", v)
		assert.Equal(t, []sluice.Outcome{sluice.Failure}, p.seen())
		require.Len(t, evs.all(), 1)
		assert.Equal(t, sluice.CauseTimeout, evs.all()[0].Cause)

		require.NoError(t, g.Do(context.Background(), func(ctx context.Context) error {
			_, err := fbWaitCtx(time.Hour)(ctx)
			return err
		}))
	})
}

func TestTimeoutWithPanickingCallReportsFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fbPolicy{name: "p"}
		g := fbGuard(t, sluice.With(p), sluice.WithTimeout(time.Second))
		assert.PanicsWithValue(t, "call broke", func() {
			_ = g.Do(context.Background(), func(context.Context) error { panic("call broke") })
		})
		assert.Equal(t, []sluice.Outcome{sluice.Failure}, p.seen())
	})
}

func TestCallContextForAdapters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fbPolicy{name: "breaker"}
		g := fbGuard(t, sluice.With(p), sluice.WithTimeout(40*time.Millisecond))
		start := time.Now()
		var c sluice.Call
		err := g.Begin(context.Background(), &c)
		require.NoError(t, err)
		dl, ok := c.Context().Deadline()
		require.True(t, ok)
		assert.Equal(t, start.Add(40*time.Millisecond), dl)
		_, err = fbWaitCtx(time.Hour)(c.Context())
		err = c.End(err)
		assert.ErrorIs(t, err, sluice.ErrTimeout)
		var te *timeouterr.Error
		require.ErrorAs(t, err, &te)
		assert.Equal(t, 40*time.Millisecond, te.After)
		assert.Equal(t, []sluice.Outcome{sluice.Failure}, p.seen())

		err = g.Begin(context.Background(), &c)
		require.NoError(t, err)
		ctx := c.Context()
		assert.NoError(t, c.End(nil))
		assert.ErrorIs(t, ctx.Err(), context.Canceled, "End releases the deadline's timer")

		// Report maps a timeout too, for the adapters that classify.
		err = g.Begin(context.Background(), &c)
		require.NoError(t, err)
		_, err = fbWaitCtx(time.Hour)(c.Context())
		assert.ErrorIs(t, c.Report(sluice.Ignored, err), sluice.ErrTimeout)
		assert.Equal(t, []sluice.Outcome{sluice.Failure, sluice.Success, sluice.Ignored}, p.seen())

		plain := fbGuard(t)
		bg := context.Background()
		err = plain.Begin(bg, &c)
		require.NoError(t, err)
		assert.Equal(t, bg, c.Context())
		assert.Same(t, errFallbackCall, c.End(errFallbackCall))
	})
}

func TestWithTimeoutValidates(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := sluice.New(sluice.WithTimeout(d))
		assert.ErrorContains(t, err, "WithTimeout")
	}
}

// A caller's own deadline that comes no later than the Guard's timeout is
// kept as it is, and an expiry then is the caller's, not a *timeouterr.Error: the
// Guard decides which deadline rules on one reading of the clock, so a
// caller's deadline that falls between two readings is not taken for its
// own. Deadlines a few nanoseconds either side of the timeout, many times.
func TestCallerDeadlineIsNotTheGuardsTimeout(t *testing.T) {
	const d = 2 * time.Microsecond
	g, err := sluice.New(sluice.WithTimeout(d))
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i := range 20000 {
		x := time.Duration(i%4000) * time.Nanosecond
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(d+x))
		callerDL, _ := ctx.Deadline()
		var runDL time.Time
		var cause error
		err := g.Do(ctx, func(cctx context.Context) error {
			runDL, _ = cctx.Deadline()
			<-cctx.Done()
			cause = context.Cause(cctx)
			return cctx.Err()
		})
		cancel()
		var te *timeouterr.Error
		if errors.As(err, &te) && runDL.Equal(callerDL) && !errors.Is(cause, sluice.ErrTimeout) {
			bad++ // the call ran under the caller's own deadline, which ended it
		}
	}
	if bad > 0 {
		t.Fatalf("%d of 20000 calls run and ended under the caller's own deadline were reported as the Guard's timeout", bad)
	}
}

// The adapters' classification of an attempt (guardhook.Classify) is a
// Call's end's: the expiry of the caller's own deadline, which came before
// the Guard's, is the caller's, not the Guard's timeout.
func TestClassifyHookKeepsTheCallersDeadline(t *testing.T) {
	classify := func(err error) sluice.Outcome {
		switch {
		case errors.Is(err, sluice.ErrTimeout):
			return sluice.Failure
		case errors.Is(err, context.DeadlineExceeded):
			return sluice.Ignored // the caller's own deadline: not the dependency's fault
		}
		return sluice.DefaultClassifier(err)
	}
	p := newRecorder("p", -1)
	g := mustGuard(t, sluice.With(p), sluice.WithTimeout(time.Hour), sluice.WithClassifier(classify))
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second)) // the caller's, passed
	defer cancel()
	var c sluice.Call
	require.NoError(t, g.Begin(ctx, &c))
	require.Equal(t, ctx, c.Context(), "the caller's earlier deadline is kept")
	hook := sluice.Outcome(guardhook.Classify(&c, context.DeadlineExceeded))
	err := c.End(context.DeadlineExceeded)
	assert.NotErrorIs(t, err, sluice.ErrTimeout, "End keeps the caller's expiry")
	require.Len(t, p.doneCalls(), 1)
	assert.Equal(t, p.doneCalls()[0].outcome, hook, "the hook classifies otherwise than the call's end")
}

// An inner Guard (1h timeout) run with the call context of an outer Guard
// (whose own, earlier deadline carries the cause ErrTimeout): the expiry is
// the caller's (the outer Guard's), as the inner Call's End has it, and the
// adapters' classification hook must agree.
func TestClassifyHookKeepsAnOuterGuardsDeadline(t *testing.T) {
	classify := func(err error) sluice.Outcome {
		switch {
		case errors.Is(err, sluice.ErrTimeout):
			return sluice.Failure
		case errors.Is(err, context.DeadlineExceeded):
			return sluice.Ignored // the caller's own deadline: not the dependency's fault
		}
		return sluice.DefaultClassifier(err)
	}
	outer := mustGuard(t, sluice.With(newRecorder("o", -1)), sluice.WithTimeout(time.Millisecond))
	p := newRecorder("p", -1)
	inner := mustGuard(t, sluice.With(p), sluice.WithTimeout(time.Hour), sluice.WithClassifier(classify))
	var hook sluice.Outcome
	var endErr error
	_ = outer.Do(context.Background(), func(ctx context.Context) error {
		var c sluice.Call
		require.NoError(t, inner.Begin(ctx, &c))
		require.Equal(t, ctx, c.Context(), "the outer Guard's earlier deadline is kept")
		<-ctx.Done()
		hook = sluice.Outcome(guardhook.Classify(&c, context.DeadlineExceeded))
		endErr = c.End(context.DeadlineExceeded)
		return endErr
	})
	assert.NotErrorIs(t, endErr, sluice.ErrTimeout, "End keeps the caller's expiry")
	require.Len(t, p.doneCalls(), 1)
	assert.Equal(t, p.doneCalls()[0].outcome, hook, "the hook classifies the outer Guard's deadline as the inner Guard's timeout")
}

// An error past the Guard's deadline that its Classifier counts for
// nothing (a not-found) stands as it is, as the adapters send a 404 or a
// NotFound answered past the deadline; a failure past it is the timeout.
func TestAnErrorPastTheDeadlineIsTheTimeoutOnlyWhenAFailure(t *testing.T) {
	errNotFound := errors.New("not found")
	classify := func(err error) sluice.Outcome {
		if errors.Is(err, errNotFound) {
			return sluice.Ignored
		}
		return sluice.DefaultClassifier(err)
	}
	synctest.Test(t, func(t *testing.T) {
		p := &fbPolicy{name: "p"}
		g := fbGuard(t, sluice.With(p), sluice.WithTimeout(100*time.Millisecond), sluice.WithClassifier(classify))
		_, err := sluice.Execute(context.Background(), g, func(ctx context.Context) (string, error) {
			<-ctx.Done()
			return "", errNotFound
		})
		require.ErrorIs(t, err, errNotFound)
		assert.NotErrorIs(t, err, sluice.ErrTimeout)
		_, err = sluice.Execute(context.Background(), g, func(ctx context.Context) (string, error) {
			<-ctx.Done()
			return "", errors.New("db: connection reset")
		})
		assert.ErrorIs(t, err, sluice.ErrTimeout)
		assert.Equal(t, []sluice.Outcome{sluice.Ignored, sluice.Failure}, p.seen())
	})
}
