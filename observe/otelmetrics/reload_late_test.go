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

// A request that picked the Guard in force just before a reload rebuilt or
// removed it (the HTTP follower loads the rules, then Begins; a program
// holds the *Guard from Loader.Guard) is served by that Guard after the
// reload put the new rules in force. A collection that came in between,
// finding the old Guard retired with nothing in flight, does not let it go
// at once: the call it serves next is reported.
func TestACallOfAReplacedGuardAfterACollectionIsCounted(t *testing.T) {
	const (
		api = "  api:\n    timeout: 2s\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1000/s, burst: 1000}\n"
		web = "  web:\n    policies:\n      - {name: wbucket, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault: web\n"
	)
	for name, next := range map[string]string{
		"rebuilt": "guards:\n" + strings.Replace(api, "2s", "3s", 1) + web,
		"removed": "guards:\n" + web,
	} {
		t.Run(name, func(t *testing.T) {
			m, reader := newReader(t)
			path := filepath.Join(t.TempDir(), "rules.yaml")
			require.NoError(t, os.WriteFile(path, []byte("guards:\n"+api+web), 0o644))
			l, err := rules.New(path, rules.WithGuardOptions(func(string) []sluice.Option {
				return []sluice.Option{sluice.WithObserver(m)}
			}))
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			ok := func(context.Context) error { return nil }

			old, _ := l.Guard("api") // a request picks the Guard in force...
			require.NoError(t, os.WriteFile(path, []byte(next), 0o644))
			require.NoError(t, l.Reload()) // ...a reload rebuilds or removes it...
			if g, ok := l.Guard("api"); ok {
				require.NotSame(t, old, g)
			}
			points(t, reader, "sluice.requests")                 // ...a scrape comes in...
			require.NoError(t, old.Do(context.Background(), ok)) // ...and the request is served.
			require.Equal(t, uint64(1), old.Stats().Policies[0].Admitted)

			got := points(t, reader, "sluice.requests")["sluice.guard=api,sluice.policy=bucket,sluice.result=admitted"]
			require.Equal(t, 1.0, got, "the call the old Guard served after a collection is lost")
		})
	}
}
