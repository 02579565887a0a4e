package breaker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
)

// A sluice.Classifier is asked only for errors: a call that returns nil is a
// Success, outside a Guard as inside one. A classifier that calls every error
// a failure must not make a successful Do or End a failure.
func TestDoAndEndNeverClassifyNil(t *testing.T) {
	everyErrorFails := func(error) sluice.Outcome { return sluice.Failure }
	clk := sluice.NewManualClock(0)

	b := mustNew(t, breaker.WithClock(clk), breaker.WithConsecutiveFailures(1))
	g, err := sluice.New(sluice.With(b), sluice.WithClock(clk), sluice.WithClassifier(everyErrorFails))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, g.Do(ctx, func(context.Context) error { return nil }))
	var pm sluice.Call
	err = g.Begin(ctx, &pm)
	require.NoError(t, err)
	require.NoError(t, pm.End(nil))
	assert.Equal(t, breaker.StateClosed, b.State(), "successful calls tripped the breaker")
	assert.Equal(t, int64(2), b.Counts().Successes)
	require.Error(t, g.Do(ctx, func(context.Context) error { return errors.New("boom") }))
	assert.Equal(t, breaker.StateOpen, b.State(), "an error still goes to the classifier")

	a, err := breaker.NewAdaptive("nil", breaker.WithClock(clk))
	require.NoError(t, err)
	ga, err := sluice.New(sluice.With(a), sluice.WithClock(clk), sluice.WithClassifier(everyErrorFails))
	require.NoError(t, err)
	for range 10 {
		require.NoError(t, ga.Do(ctx, func(context.Context) error { return nil }))
	}
	requests, accepts := a.Requests(clk.Now())
	assert.Equal(t, int64(10), requests)
	assert.Equal(t, int64(10), accepts, "successful calls counted as not accepted")
}
