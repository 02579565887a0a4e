package dashboard

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A request that picked the Guard in force just before a reload rebuilt it
// is served by that Guard after its successor is in force (the HTTP
// follower loads the rules, then Begins). A view of the page in between,
// finding the old Guard retired with nothing in flight, does not freeze its
// counts at once: the call it serves next reaches the page's totals.
func TestThePageCountsACallOfAReplacedGuardAfterAView(t *testing.T) {
	v1 := "guards:\n  api:\n    timeout: 2s\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault: api\n"
	d, l, path, _ := loaderWithPage(t, v1)
	old, _ := l.Guard("api")
	require.NoError(t, old.Do(context.Background(), func(context.Context) error { return nil }))
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(v1, "2s", "3s", 1)), 0o644))
	require.NoError(t, l.Reload())
	require.EqualValues(t, 1, pageAdmitted(t, d))
	require.NoError(t, old.Do(context.Background(), func(context.Context) error { return nil }))
	require.EqualValues(t, 2, old.Stats().Policies[0].Admitted)
	require.EqualValues(t, 2, pageAdmitted(t, d), "the call the replaced Guard served after a view is lost from the page")
}
