package dashboard

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/rules"
	"github.com/stretchr/testify/require"
)

// A reload that changes a Guard's chain (a breaker added, then the
// limiter removed) keeps the Guard's totals on the page, as Prometheus
// keeps them by name, and the counts of the policies both chains have.
func TestAReloadThatChangesTheChainKeepsTheTotals(t *testing.T) {
	bucket := "      - {name: bucket, kind: token-bucket, rate: 1/m, burst: 2}\n"
	brk := "      - {name: brk, kind: breaker, consecutive_failures: 3}\n"
	head := "guards:\n  api:\n    policies:\n"
	d, l, path, _ := loaderWithPage(t, head+bucket+"default: api\n")
	g, _ := l.Guard("api")
	ok := func(context.Context) error { return nil }
	for range 3 { // two admitted, one rate limited
		_ = g.Do(context.Background(), ok)
	}
	api := func() guardView {
		t.Helper()
		for _, gv := range getState(t, d).Guards {
			if gv.Name == "api" {
				return gv
			}
		}
		t.Fatal("api not shown")
		return guardView{}
	}
	before := api()
	require.EqualValues(t, 2, before.Admitted)
	require.EqualValues(t, 1, before.Rejected["rate-limited"])

	require.NoError(t, os.WriteFile(path, []byte(head+bucket+brk+"default: api\n"), 0o644))
	require.NoError(t, l.Reload())
	g, _ = l.Guard("api")
	require.Len(t, g.Policies(), 2)
	_ = g.Do(context.Background(), ok) // the bucket's burst is spent: rate limited
	v := api()
	require.EqualValues(t, 2, v.Admitted, "a breaker added by a reload reset the Guard's admitted calls")
	require.EqualValues(t, 2, v.Rejected["rate-limited"], "a breaker added by a reload reset the Guard's rejections")
	require.Equal(t, "bucket", v.Policies[0].Name)
	require.EqualValues(t, 2, v.Policies[0].Admitted, "the bucket, in both chains, lost its count")
	require.EqualValues(t, 2, v.Policies[0].Rejected["rate-limited"])
	require.Zero(t, v.Policies[1].Admitted, "the breaker, new, shows calls it never saw")

	require.NoError(t, os.WriteFile(path, []byte(head+brk+"default: api\n"), 0o644))
	require.NoError(t, l.Reload())
	g, _ = l.Guard("api")
	_ = g.Do(context.Background(), ok)
	v = api()
	require.EqualValues(t, 3, v.Admitted, "removing the limiter reset the Guard's admitted calls")
	require.EqualValues(t, 2, v.Rejected["rate-limited"], "removing the limiter took its rejections off the Guard's total")
	require.Len(t, v.Policies, 1)
	require.EqualValues(t, 1, v.Policies[0].Admitted)
}

// A reload of a Guard whose fallback answered shows that fallback once: the
// Guard after the reload does not tell again what the page told of the one
// before.
func TestAReloadDoesNotRepeatAFallbackEvent(t *testing.T) {
	v1 := "guards:\n  api:\n    timeout: 2s\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1/m, burst: 1}\ndefault: api\nfallbacks:\n  - {cause: rate-limited, status: 200, body: cached}\n"
	d, l, path, _ := loaderWithPage(t, v1)
	mw, err := l.HTTP()
	require.NoError(t, err)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "fresh") }))
	get := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		return rec.Body.String()
	}
	require.Equal(t, "fresh", get())
	require.Equal(t, "cached", get())
	fallbackEvents := func() int {
		n := 0
		for _, e := range getState(t, d).Events {
			if e.Kind == "fallback" {
				n += e.Times
			}
		}
		return n
	}
	require.Equal(t, 1, fallbackEvents())

	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(v1, "2s", "3s", 1)), 0o644))
	require.NoError(t, l.Reload())
	require.Equal(t, 1, fallbackEvents(), "the page told again of a fallback it had told of before the reload")
}

// An action the page drew before a reload reordered the Guard's chain
// names the policy by its place and its name: the policy now at that place
// is another, and the action is refused rather than taken on it.
func TestAnActionOnAPolicyAReloadMovedIsRefused(t *testing.T) {
	v1 := "guards:\n  api:\n    policies:\n" +
		"      - {name: payments, kind: breaker, open_for: 1m}\n" +
		"      - {name: search, kind: breaker, open_for: 1m}\ndefault: api\n"
	d, err := New(WithAuthorizer(func(*http.Request) bool { return true }), WithHosts("dash.test"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(v1), 0o644))
	l, err := rules.New(path, rules.WithGuardOptions(func(string) []sluice.Option { return []sluice.Option{sluice.WithObserver(d)} }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	form := url.Values{"token": {pageToken(t, d)}, "guard": {"api"}, "policy": {"0"}, "name": {"breaker/payments"}, "action": {"open"}}

	v2 := strings.Replace(strings.Replace(v1, "payments", "tmp", 1), "search", "payments", 1)
	v2 = strings.Replace(v2, "tmp", "search", 1)
	require.NoError(t, os.WriteFile(path, []byte(v2), 0o644))
	require.NoError(t, l.Reload())

	rec := post(d, form, "Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), `policy 0 is \"breaker/search\", not \"breaker/payments\"`)
	g, _ := l.Guard("api")
	for _, p := range g.Policies() {
		require.Equal(t, breaker.StateClosed, p.(*breaker.Breaker).State(), "%s forced open", p.Name())
	}
}
