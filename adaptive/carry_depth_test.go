package adaptive_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/policytest"
	"github.com/sluice-go/sluice/internal/shedhook"
)

// A call still in flight in a bulkhead made five reloads ago holds a slot
// of the one in force: the chain is cut past maxCarried only where no call
// runs, so the newest bulkhead admits no full limit beside the old call.
func TestACallInFlightFiveReloadsAgoStillHoldsItsSlot(t *testing.T) {
	var chain []*adaptive.Shedder
	for range 6 {
		s, err := adaptive.NewBulkhead(1)
		require.NoError(t, err)
		chain = append(chain, s)
	}
	v0 := policytest.AnswerOf(chain[0].Admit(context.Background(), 0)) // a long call: a stream, say
	require.NoError(t, v0.Cause)
	for i := 1; i < len(chain); i++ {
		shedhook.Carry(chain[i-1], chain[i]) // five quick reloads
	}
	v := policytest.AnswerOf(chain[5].Admit(context.Background(), ms))
	require.Error(t, v.Cause, "two calls ran under a limit of 1: the oldest bulkhead's call was let go while in flight (%d)",
		chain[0].Stats().Inflight)
}
