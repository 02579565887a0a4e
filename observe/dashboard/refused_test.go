package dashboard

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"weak"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refusingObserver refuses every Guard, as an observer may.
type refusingObserver struct{}

func (refusingObserver) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return nil, nil, errors.New("refused")
}

// A Guard that sluice.New refused (a later observer failed) never served:
// the dashboard does not show it.
func TestARefusedGuardIsNotShown(t *testing.T) {
	d, err := New()
	require.NoError(t, err)
	limit, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1, ratelimit.WithName("ratelimit/typo"))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("typo"), sluice.With(limit), sluice.WithObserver(d), sluice.WithObserver(refusingObserver{}))
	require.Error(t, err)
	require.Nil(t, g)
	for range 3 {
		assert.Empty(t, getState(t, d).Guards)
	}
}

// weakRefuser refuses every Guard, keeping only a weak pointer to it.
type weakRefuser struct{ seen *weak.Pointer[sluice.Guard] }

func (r weakRefuser) Attach(g *sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	*r.seen = weak.Make(g)
	return nil, nil, errors.New("refused")
}

// A Guard New refused, made while the Guard of its name was let go of but
// still serves (a rules reload's), leaves that Guard's watch kept for the
// name, for the next Guard to carry from: the refused one is not kept, nor
// held in memory.
func TestARefusedGuardLeavesTheServingOneKept(t *testing.T) {
	d, err := New()
	require.NoError(t, err)
	mk := func() sluice.Policy {
		l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(100), 100, ratelimit.WithName("ratelimit/api"))
		require.NoError(t, err)
		return l
	}
	g1, err := sluice.New(sluice.WithName("api"), sluice.With(mk()), sluice.WithObserver(d))
	require.NoError(t, err)
	require.NoError(t, g1.Do(context.Background(), func(context.Context) error { return nil }))
	guardhook.Detach(g1) // a reload let it go; it still serves

	var seen weak.Pointer[sluice.Guard]
	func() {
		g, err := sluice.New(sluice.WithName("api"), sluice.With(mk()), sluice.WithObserver(d), sluice.WithObserver(weakRefuser{&seen}))
		require.Error(t, err)
		require.Nil(t, g)
	}()
	require.NotNil(t, seen.Value())

	d.mu.Lock()
	kept := d.retired["api"]
	d.mu.Unlock()
	require.NotNil(t, kept)
	assert.True(t, kept.g == g1, "the watch kept for the name is the serving Guard's")

	g3, err := sluice.New(sluice.WithName("api"), sluice.With(mk()), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g3.Close()
	for range 3 {
		getState(t, d)
	}
	runtime.GC()
	runtime.GC()
	require.True(t, seen.Value() == nil, "the refused Guard is held by its successor's watch")
	runtime.KeepAlive(g1)
}
