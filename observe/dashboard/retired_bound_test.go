package dashboard

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// The Guards that reloads remove are kept, by name, for a successor of
// their name to carry their counts on, but within a bound: with names that
// come and go, the page does not hold their Guards and policies for good.
func TestRemovedGuardsAreHeldWithinABound(t *testing.T) {
	was := maxRetired
	maxRetired = 8
	t.Cleanup(func() { maxRetired = was })
	file := func(i int) string {
		return fmt.Sprintf("guards:\n  g%d:\n    policies:\n      - {name: b%d, kind: token-bucket, rate: 1000/s, burst: 1000}\n  web:\n    policies:\n      - {name: wb, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault: web\n", i, i)
	}
	d, l, path, _ := loaderWithPage(t, file(0))
	const n = 40
	for i := range n {
		g, ok := l.Guard(fmt.Sprintf("g%d", i))
		require.True(t, ok)
		require.NoError(t, g.Do(context.Background(), func(context.Context) error { return nil }))
		require.NoError(t, os.WriteFile(path, []byte(file(i+1)), 0o644))
		require.NoError(t, l.Reload()) // removes g<i>
	}
	d.mu.Lock()
	held := len(d.retired)
	d.mu.Unlock()
	require.LessOrEqual(t, held, 8, "the page holds the watches of %d removed Guards", held)
}
