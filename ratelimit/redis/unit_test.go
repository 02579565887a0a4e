package redislimit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

// TestDeadlineEpochs pins the shared call deadlines: calls within one grain
// share an epoch, its deadline is the timeout after the epoch starts, and its
// Done closes then.
func TestDeadlineEpochs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEpochs(160 * time.Millisecond) // grain 10ms
		start := time.Now()
		first := e.get()
		assert.Equal(t, start.Add(160*time.Millisecond), first.deadline)
		time.Sleep(9 * time.Millisecond)
		assert.Same(t, first, e.get(), "a call within the grain shares the epoch")
		time.Sleep(time.Millisecond)
		second := e.get()
		assert.NotSame(t, first, second)
		ctx := &callCtx{parent: context.WithValue(context.Background(), ctxKey{}, "v"), ep: first}
		dl, ok := ctx.Deadline()
		assert.True(t, ok)
		assert.Equal(t, first.deadline, dl)
		assert.Equal(t, "v", ctx.Value(ctxKey{}))
		assert.NoError(t, ctx.Err())
		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		select {
		case <-ctx.Done():
		default:
			t.Fatal("Done not closed at the deadline")
		}
		assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
		assert.NoError(t, (&callCtx{parent: context.Background(), ep: second}).Err())
		time.Sleep(time.Second)
	})
}

type ctxKey struct{}

// TestBreakerStates walks the breaker around Redis through its states at
// fixed instants.
func TestBreakerStates(t *testing.T) {
	b := &redisBreaker{threshold: 3, openFor: time.Second}
	ms := time.Millisecond
	steps := []struct {
		name    string
		do      func() transition
		state   uint32
		changed bool
	}{
		{"success keeps it closed", func() transition { return b.success(false) }, stateClosed, false},
		{"failure 1", func() transition { return b.failure(10*ms, false) }, stateClosed, false},
		{"failure 2", func() transition { return b.failure(20*ms, false) }, stateClosed, false},
		{"a success resets the count", func() transition { return b.success(false) }, stateClosed, false},
		{"failure 1 again", func() transition { return b.failure(30*ms, false) }, stateClosed, false},
		{"failure 2 again", func() transition { return b.failure(40*ms, false) }, stateClosed, false},
		{"failure 3 opens", func() transition { return b.failure(50*ms, false) }, stateOpen, true},
	}
	for _, st := range steps {
		tr := st.do()
		assert.Equal(t, st.state, b.state.Load(), st.name)
		assert.Equal(t, st.changed, tr.changed(), st.name)
	}
	ok, _, _ := b.acquire(500 * ms)
	assert.False(t, ok, "open: no call to Redis")
	assert.Equal(t, 550*ms, b.openLeft(500*ms))
	ok, probe, tr := b.acquire(1050 * ms)
	require.True(t, ok)
	assert.True(t, probe)
	assert.Equal(t, transition{stateOpen, stateHalfOpen}, tr)
	ok, _, _ = b.acquire(1051 * ms)
	assert.False(t, ok, "half-open: one probe at a time")
	tr = b.failure(1100*ms, true)
	assert.Equal(t, transition{stateHalfOpen, stateOpen}, tr, "a failed probe opens it again")
	ok, _, _ = b.acquire(2000 * ms)
	assert.False(t, ok)
	ok, probe, _ = b.acquire(2100 * ms)
	require.True(t, ok)
	require.True(t, probe)
	tr = b.success(true)
	assert.Equal(t, transition{stateHalfOpen, stateClosed}, tr, "a successful probe closes it")
	ok, probe, _ = b.acquire(2101 * ms)
	assert.True(t, ok)
	assert.False(t, probe)
}

// TestNegativeCacheBounds pins that the cache holds at most its capacity,
// making room by dropping expired entries.
func TestNegativeCacheBounds(t *testing.T) {
	c := &negCache{m: make(map[string]negEntry), max: 2}
	rej := func(retry time.Duration) sluice.Decision { return sluice.Decision{RetryAfter: retry, Reset: retry} }
	c.put("a", 0, rej(time.Second))
	c.put("b", 0, rej(2*time.Second))
	c.put("c", 0, rej(time.Second)) // full, nothing expired: not cached
	_, ok := c.get("c", 0)
	assert.False(t, ok)
	d, ok := c.get("a", 400*time.Millisecond)
	require.True(t, ok)
	assert.Equal(t, 600*time.Millisecond, d.RetryAfter)
	c.put("c", 1500*time.Millisecond, rej(time.Second)) // "a" has expired: room
	_, ok = c.get("c", 1500*time.Millisecond)
	assert.True(t, ok)
	_, ok = c.get("b", 2*time.Second)
	assert.False(t, ok, "expired at its RetryAfter")
}
