package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/ratelimit"
)

// The page keys its cells by guard + "/" + policy index and by "switch/" +
// switch name: a Guard named "switch" and a switch named "0" share the key
// "switch/0", and every render throws.
func TestAGuardNamedSwitchKeepsThePageLive(t *testing.T) {
	exe := chromiumPath(t)
	sw, err := degrade.NewSwitch("0")
	require.NoError(t, err)
	d, err := New(WithSwitches(sw))
	require.NoError(t, err)
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10, ratelimit.WithName("rate"))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("switch"), sluice.With(tb), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g.Close()
	mux := http.NewServeMux()
	mux.Handle("/debug/sluice/", d)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
			chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.UserDataDir(t.TempDir()))...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx))
	var cons console
	watching := make(chan struct{})
	go func() { defer close(watching); cons.watch(ctx) }()
	defer func() { cancel(); <-watching }()

	sctx, done := context.WithTimeout(ctx, 20*time.Second)
	defer done()
	require.NoError(t, chromedp.Do(sctx, chromedp.Navigate(srv.URL+"/debug/sluice/"),
		chromedp.WaitVisible(chromedp.CSS(`.guard[data-guard="switch"]`))))
	time.Sleep(2500 * time.Millisecond) // two or three snapshots
	status, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('status').textContent`))
	require.NoError(t, err)
	assert.Contains(t, status, "live", "the page's status")
	assert.Empty(t, cons.errors())
}
