package dashboard

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
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
