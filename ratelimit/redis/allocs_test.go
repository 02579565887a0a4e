//go:build !race

// The race detector makes sync.Pool drop items at random, so allocations
// are counted without it.

package redislimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// TestAllocations bounds the allocations of a decision: the round trip
// through go-redis allocates (its command, its arguments, the reply), the
// limiter itself next to nothing; decisions without Redis allocate nothing.
func TestAllocations(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	for _, alg := range algorithms {
		l, err := alg.make(c, 1<<20, time.Microsecond, WithName(uniqueName(alg.name)))
		require.NoError(t, err)
		ctx := sluice.WithKey(context.Background(), "user")
		allocs := testing.AllocsPerRun(200, func() {
			d, tk := admitD(l, ctx, 0)
			l.Done(tk, sluice.Success, 0, 0)
			if !d.Allowed {
				panic("rejected")
			}
		})
		t.Logf("%s: %.1f allocs per decision", alg.name, allocs)
		assert.LessOrEqual(t, allocs, 10.0, alg.name)
	}

	// The breaker open: the failure policy decides, with no allocation.
	l, err := NewGCRA(c, ratelimit.PerSecond(10), 10, WithName(uniqueName("open")), WithFailClosed())
	require.NoError(t, err)
	l.br.b.ForceOpen()
	allocs := testing.AllocsPerRun(200, func() { l.Admit(context.Background(), time.Millisecond) })
	assert.Zero(t, allocs)

	// The negative cache answering.
	l, err = NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 1, WithName(uniqueName("neg")), WithNegativeCache(10))
	require.NoError(t, err)
	l.Admit(context.Background(), 0)
	d, _ := admitD(l, context.Background(), 0)
	require.False(t, d.Allowed)
	allocs = testing.AllocsPerRun(200, func() { l.Admit(context.Background(), time.Millisecond) })
	assert.LessOrEqual(t, allocs, 1.0) // the key
}
