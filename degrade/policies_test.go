package degrade_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/policytest"
	"github.com/sluice-go/sluice/ratelimit"
)

// rateLimiter returns a fixed-window rate limit of one request a minute whose
// quota is spent at instant 0: use it in a Guard on a ManualClock.
func rateLimiter(t testing.TB) sluice.Policy {
	t.Helper()
	l, err := ratelimit.NewFixedWindow(1, time.Minute, ratelimit.WithName("ratelimit/test"))
	require.NoError(t, err)
	v := policytest.AnswerOf(l.Admit(context.Background(), 0))
	require.NoError(t, v.Cause)
	l.Done(v.Ticket, sluice.Success, 0, 0)
	return l
}

// openBreaker returns a circuit breaker forced open.
func openBreaker(t testing.TB) sluice.Policy {
	t.Helper()
	b, err := breaker.New("test")
	require.NoError(t, err)
	b.ForceOpen()
	return b
}

// overloadedGuard returns a load shedder without a queue whose every slot
// is taken.
func overloadedGuard(t testing.TB) sluice.Policy {
	t.Helper()
	s, err := adaptive.NewShedder(adaptive.WithName("adaptive/test"), adaptive.WithQueue(0, 0))
	require.NoError(t, err)
	for range s.Stats().Limit {
		v := policytest.AnswerOf(s.Admit(context.Background(), 0))
		require.NoError(t, v.Cause)
	}
	return s
}

// fullBulkhead returns a bulkhead of one slot, taken.
func fullBulkhead(t testing.TB) sluice.Policy {
	t.Helper()
	b, err := adaptive.NewBulkhead(1, adaptive.WithName("adaptive/bulkhead-test"))
	require.NoError(t, err)
	v := policytest.AnswerOf(b.Admit(context.Background(), 0))
	require.NoError(t, v.Cause)
	return b
}
