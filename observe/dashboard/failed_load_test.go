package dashboard

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
)

// A load that fails after it rebuilt a Guard makes the Guard in force
// again from the calls that had ended ("a load that fails changes
// nothing"): a call under way in the old Guard, admitted and shown, ends
// there, and the page shows it still, and its end.
func TestAFailedLoadLosesNoCallOnThePage(t *testing.T) {
	v1 := "guards:\n  api:\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault: api\n"
	d, l, path, refuse := loaderWithPage(t, v1)
	g, _ := l.Guard("api")
	require.NoError(t, g.Do(context.Background(), func(context.Context) error { return nil }))
	var held sluice.Call // a long call, under way across the reload
	require.NoError(t, g.Begin(context.Background(), &held))
	require.EqualValues(t, 2, pageAdmitted(t, d))

	v2 := strings.Replace(v1, "default:", "      - {name: other, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault:", 1)
	require.NoError(t, os.WriteFile(path, []byte(v2), 0o644))
	refuse.Store(true)
	require.Error(t, l.Reload())
	g2, _ := l.Guard("api")
	require.NotSame(t, g, g2)
	require.EqualValues(t, 2, pageAdmitted(t, d), "the failed load took a call under way off the page's total")

	_ = held.End(nil)
	require.EqualValues(t, 2, pageAdmitted(t, d), "the call that was under way, now ended, is lost from the page")
	st := getState(t, d)
	for _, gv := range st.Guards {
		if gv.Name == "api" {
			for _, pv := range gv.Policies {
				require.Zero(t, pv.Inflight, "policy %s shows a call in flight that ended", pv.Name)
			}
		}
	}
}

// loaderWithPage loads the rules content with a Loader whose Guards the
// dashboard it returns shows, beside an observer that refuses its next
// Attach once refuse is set; path is the rules file's.
func loaderWithPage(t *testing.T, content string) (d *Dashboard, l *rules.Loader, path string, refuse *atomic.Bool) {
	t.Helper()
	d, err := New()
	require.NoError(t, err)
	refuse = new(atomic.Bool)
	path = filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	l, err = rules.New(path, rules.WithGuardOptions(func(string) []sluice.Option {
		return []sluice.Option{sluice.WithObserver(d), sluice.WithObserver(refuseNextAttach{refuse})}
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return d, l, path, refuse
}
