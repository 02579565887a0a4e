package otelmetrics_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
)

// A request that picked the Guard in force just before a reload rebuilt it
// (the HTTP follower loads the rules, then Begins; a program holds the
// *Guard from Loader.Guard) is served by that Guard after the reload put
// its successor in force. A collection that came in between, finding the
// old Guard retired with nothing in flight, does not let it go at once:
// the call it serves next is reported.
func TestACallOfAReplacedGuardAfterACollectionIsCounted(t *testing.T) {
	m, reader := newReader(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	v1 := "guards:\n  api:\n    timeout: 2s\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault: api\n"
	require.NoError(t, os.WriteFile(path, []byte(v1), 0o644))
	l, err := rules.New(path, rules.WithGuardOptions(func(string) []sluice.Option {
		return []sluice.Option{sluice.WithObserver(m)}
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ok := func(context.Context) error { return nil }
	const admitted = "sluice.guard=api,sluice.policy=bucket,sluice.result=admitted"

	old, _ := l.Guard("api") // a request picks the Guard in force...
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(v1, "2s", "3s", 1)), 0o644))
	require.NoError(t, l.Reload())                       // ...a reload rebuilds it...
	points(t, reader, "sluice.requests")                 // ...a scrape comes in...
	require.NoError(t, old.Do(context.Background(), ok)) // ...and the request is served.
	require.Equal(t, uint64(1), old.Stats().Policies[0].Admitted)

	got := points(t, reader, "sluice.requests")[admitted]
	require.Equal(t, 1.0, got, "sluice.requests admitted: the call the replaced Guard served after a collection is lost")
}
