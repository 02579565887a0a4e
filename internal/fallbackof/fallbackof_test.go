package fallbackof_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/internal/fallbackof"
)

var errCall = errors.New("call failed")

func handlerGuard(t *testing.T, rule degrade.Rule[http.Handler]) *sluice.Guard {
	t.Helper()
	fb, err := degrade.New(rule)
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithFallback(fb))
	require.NoError(t, err)
	return g
}

// Value answers as Execute does: the fallback of its type that declares an
// answer serves, a declared answer of another type is an error, and with
// none declared the error goes on as it is.
func TestValue(t *testing.T) {
	ctx := context.Background()
	h := http.NotFoundHandler()
	var served int
	fb, err := degrade.New(degrade.OnError(degrade.Value[http.Handler](h)))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithFallback(fb), sluice.OnFallback(func(context.Context, sluice.FallbackEvent) { served++ }))
	require.NoError(t, err)
	got, err := fallbackof.Value[http.Handler](ctx, g, errCall)
	require.NoError(t, err)
	assert.NotNil(t, got)
	assert.Equal(t, 1, served, "the Guard's observers hear of the answer")

	_, err = fallbackof.Value[any](ctx, g, errCall)
	assert.ErrorIs(t, err, errCall)
	assert.ErrorContains(t, err, "answering any")

	none := handlerGuard(t, degrade.OnTimeout(degrade.Value[http.Handler](h)))
	_, err = fallbackof.Value[http.Handler](ctx, none, errCall)
	assert.Same(t, errCall, err)

	declines := handlerGuard(t, degrade.OnError(func(context.Context, error) (http.Handler, error) { return nil, errors.ErrUnsupported }))
	_, err = fallbackof.Value[http.Handler](ctx, declines, errCall)
	assert.Same(t, errors.ErrUnsupported, err)

	_, err = fallbackof.Value[http.Handler](ctx, nil, errCall)
	assert.Same(t, errCall, err, "a nil Guard has no fallback")
}

// The adapters' fallback layer allocates nothing of its own, whether a
// fallback serves or none declares an answer.
func TestValueAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	h := http.NotFoundHandler()
	serves := handlerGuard(t, degrade.OnError(degrade.Value[http.Handler](h)))
	none := handlerGuard(t, degrade.OnTimeout(degrade.Value[http.Handler](h)))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = fallbackof.Value[http.Handler](ctx, serves, errCall) }))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = fallbackof.Value[http.Handler](ctx, none, errCall) }))
}

// A fallback that answers a nil handler (a lookup that found no page) has
// answered nothing an adapter can send: that is an error wrapping the
// call's, and no fallback is counted as served.
func TestValueOfNilIsAnError(t *testing.T) {
	var served int
	fb, err := degrade.New(degrade.OnError(func(context.Context, error) (http.Handler, error) { return nil, nil }))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithFallback(fb), sluice.OnFallback(func(context.Context, sluice.FallbackEvent) { served++ }))
	require.NoError(t, err)
	got, err := fallbackof.Value[http.Handler](context.Background(), g, errCall)
	assert.Nil(t, got)
	require.ErrorIs(t, err, errCall)
	assert.ErrorContains(t, err, "answered a nil http.Handler")
	assert.Zero(t, served)
	assert.Zero(t, g.Stats().Fallbacks)
}
