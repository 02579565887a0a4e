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
	d, err := New()
	require.NoError(t, err)
	var refuse atomic.Bool
	path := filepath.Join(t.TempDir(), "rules.yaml")
	v1 := "guards:\n  api:\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault: api\n"
	require.NoError(t, os.WriteFile(path, []byte(v1), 0o644))
	l, err := rules.New(path, rules.WithGuardOptions(func(string) []sluice.Option {
		return []sluice.Option{sluice.WithObserver(d), sluice.WithObserver(refuseNextAttach{&refuse})}
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	g, _ := l.Guard("api")
	require.NoError(t, g.Do(context.Background(), func(context.Context) error { return nil }))
	var held sluice.Call // a long call, under way across the reload
	require.NoError(t, g.Begin(context.Background(), &held))
	admitted := func() uint64 {
		for _, gv := range getState(t, d).Guards {
			if gv.Name == "api" {
				return gv.Admitted
			}
		}
		t.Fatal("api not shown")
		return 0
	}
	require.EqualValues(t, 2, admitted())

	v2 := strings.Replace(v1, "default:", "      - {name: other, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault:", 1)
	require.NoError(t, os.WriteFile(path, []byte(v2), 0o644))
	refuse.Store(true)
	require.Error(t, l.Reload())
	g2, _ := l.Guard("api")
	require.NotSame(t, g, g2)
	require.EqualValues(t, 2, admitted(), "the failed load took a call under way off the page's total")

	_ = held.End(nil)
	require.EqualValues(t, 2, admitted(), "the call that was under way, now ended, is lost from the page")
	st := getState(t, d)
	for _, gv := range st.Guards {
		if gv.Name == "api" {
			for _, pv := range gv.Policies {
				require.Zero(t, pv.Inflight, "policy %s shows a call in flight that ended", pv.Name)
			}
		}
	}
}
