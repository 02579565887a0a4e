package redislimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

// A coalesced request is decided under its batch's numbers, the lead's: one
// queued after a SetLimit that raised the limit, behind one queued before
// it, is rejected under the old quota, and remembered under it, so that
// under the new numbers the next request goes to Redis, which admits it.
func TestACoalescedRejectionIsRememberedUnderTheBatchsNumbers(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	open := make(chan struct{})
	gate := &gateHook{before: func(n int64) {
		if n <= maxFlights {
			<-open // the first calls in flight are held
		}
	}}
	c.AddHook(gate)
	const window = 10 * time.Hour
	l, err := NewFixedWindow(c, 2, window, WithName(uniqueName("neg-batch")), WithTimeout(5*time.Second),
		WithNegativeCache(16), WithFailClosed())
	require.NoError(t, err)
	require.NotNil(t, l.lanes, "coalescing is on by default")

	ctx := sluice.WithKey(context.Background(), "hot")
	cost2 := sluice.WithCost(ctx, 2) // cost 2: never remembered by the negative cache
	var wg sync.WaitGroup
	// maxFlights calls in flight for the key, held: the first takes the
	// whole quota of 2, the others are rejected (and not remembered).
	for range maxFlights {
		wg.Go(func() { l.admit(cost2, time.Hour) })
	}
	require.Eventually(t, func() bool { return gate.calls.Load() == maxFlights }, 5*time.Second, time.Millisecond)
	// w1 queues under the old numbers (quota 2): it will lead the batch.
	wg.Go(func() { l.admit(cost2, time.Hour) })
	awaitQueue(t, l, 1)
	// The limit is raised to 10 per window; w2 queues under the new numbers.
	require.NoError(t, l.SetLimit(10, window))
	var w2 sluice.Decision
	wg.Go(func() { w2, _ = l.admit(ctx, time.Hour) })
	awaitQueue(t, l, 2)
	close(open)
	wg.Wait()
	require.False(t, w2.Allowed, "decided by the batch under quota 2: %+v", w2)

	// Redis holds a count of 2 against a limit of 10: a request of cost 1
	// fits. The negative cache answers instead, from a rejection decided
	// under quota 2 and remembered as if under quota 10.
	d, _ := l.admit(ctx, time.Hour+time.Second)
	assert.True(t, d.Allowed, "rejected from the negative cache for %v under numbers it was not decided under: %+v", d.RetryAfter, d)
	// Without the remembered rejection, Redis admits it.
	l.neg.clear()
	d, _ = l.admit(ctx, time.Hour+2*time.Second)
	assert.True(t, d.Allowed, "Redis itself admits under quota 10: %+v", d)
}
