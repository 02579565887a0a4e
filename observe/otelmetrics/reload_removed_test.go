package otelmetrics_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
)

// As for a Guard a reload rebuilt: a request that picked the Guard "api"
// just before a reload removed it is served by that Guard after the
// reload, and a collection in between does not lose that call.
func TestACallOfARemovedGuardAfterACollectionIsCounted(t *testing.T) {
	m, reader := newReader(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	v1 := "guards:\n  api:\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1000/s, burst: 1000}\n  web:\n    policies:\n      - {name: wbucket, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault: web\n"
	v2 := "guards:\n  web:\n    policies:\n      - {name: wbucket, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault: web\n"
	require.NoError(t, os.WriteFile(path, []byte(v1), 0o644))
	l, err := rules.New(path, rules.WithGuardOptions(func(string) []sluice.Option {
		return []sluice.Option{sluice.WithObserver(m)}
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ok := func(context.Context) error { return nil }
	const admitted = "sluice.guard=api,sluice.policy=bucket,sluice.result=admitted"

	old, _ := l.Guard("api") // a request picks the Guard in force...
	require.NoError(t, os.WriteFile(path, []byte(v2), 0o644))
	require.NoError(t, l.Reload())                       // ...a reload removes it...
	points(t, reader, "sluice.requests")                 // ...a scrape comes in...
	require.NoError(t, old.Do(context.Background(), ok)) // ...and the request is served.
	require.Equal(t, uint64(1), old.Stats().Policies[0].Admitted)

	got := points(t, reader, "sluice.requests")[admitted]
	require.Equal(t, 1.0, got, "sluice.requests admitted: the call the removed Guard served after a collection is lost")
}
