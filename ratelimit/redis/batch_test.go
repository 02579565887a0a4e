package redislimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// TestConcurrentDecisionsArePipelined holds one script in flight (Redis
// paused) while 7 more decisions arrive: they wait in the queue and then go
// out together in one pipeline, each with its own reply.
func TestConcurrentDecisionsArePipelined(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	l, err := NewTokenBucket(c, ratelimit.PerHour(100), 100, WithName(uniqueName("batch")), WithTimeout(5*time.Second))
	require.NoError(t, err)
	require.NoError(t, s.Pause())
	var wg sync.WaitGroup
	ds := make([]sluice.Decision, 8)
	for i := range ds {
		wg.Go(func() {
			var tk sluice.Ticket
			ds[i], tk = l.Admit(context.Background(), 0)
			if ds[i].Allowed {
				l.Done(tk, sluice.Success, 0, 0)
			}
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.batch.mu.Lock()
		queued := len(l.batch.queue)
		l.batch.mu.Unlock()
		if queued == len(ds)-1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "decisions did not queue behind the one in flight")
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, s.Resume())
	wg.Wait()
	assert.EqualValues(t, 1, l.batch.pipelines.Load())
	seen := map[int64]bool{}
	for _, d := range ds {
		require.Equal(t, l.Name(), d.Policy)
		require.True(t, d.Allowed)
		seen[d.Remaining] = true
	}
	// Every script ran on its own: the 8 decisions left 99 … 92 tokens.
	assert.Len(t, seen, len(ds))
}
