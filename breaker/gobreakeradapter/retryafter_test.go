package gobreakeradapter_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/breaker/gobreakeradapter"
	"github.com/sluice-go/sluice/internal/breakerview"
	"github.com/sluice-go/sluice/internal/monoclock"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
)

// A dependency answering 503 with Retry-After: 30 asks its callers to hold
// off: behind sluicehttp.Transport, the gobreaker engine is held open for
// that long, as the default engine is (both are sluice.Openers), and the
// requests that follow do not reach the dependency.
func TestRetryAfterHoldsBothEnginesOpen(t *testing.T) {
	run := func(t *testing.T, p sluice.Policy) int64 {
		var hits atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		defer srv.Close()
		g, err := sluice.New(sluice.With(p))
		require.NoError(t, err)
		rt, err := sluicehttp.Transport(srv.Client().Transport, func(string) (*sluice.Guard, error) { return g, nil })
		require.NoError(t, err)
		c := &http.Client{Transport: rt}
		for range 3 {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
			}
		}
		return hits.Load()
	}
	def, err := breaker.New("dep", breaker.WithConsecutiveFailures(100))
	require.NoError(t, err)
	require.EqualValues(t, 1, run(t, def), "default engine: held open by Retry-After")

	gb, err := gobreakeradapter.New(gobreaker.Settings{Name: "dep", Timeout: time.Minute})
	require.NoError(t, err)
	require.EqualValues(t, 1, run(t, gb), "gobreaker engine: held open by Retry-After")
}

// OpenFor holds the Policy open until the later of the instants asked,
// with a RetryAfter of what is left, and leaves gobreaker's state alone.
func TestOpenForHoldsUntilTheLaterInstant(t *testing.T) {
	p, err := gobreakeradapter.New(gobreaker.Settings{Name: "dep"})
	require.NoError(t, err)
	ctx := context.Background()
	p.OpenFor(ctx, time.Second, 0) // asks nothing
	_, _, err = p.Admit(ctx, time.Second)
	require.NoError(t, err)
	p.OpenFor(ctx, time.Second, 5*time.Second)
	p.OpenFor(ctx, 2*time.Second, time.Second) // sooner: changes nothing
	_, q, err := p.Admit(ctx, 4*time.Second)
	require.ErrorIs(t, err, sluice.ErrCircuitOpen)
	require.Equal(t, 2*time.Second, q.RetryAfter)
	require.Equal(t, gobreaker.StateClosed, p.Breaker().State())
	tk, _, err := p.Admit(ctx, 6*time.Second)
	require.NoError(t, err)
	p.Done(tk, sluice.Success, 6*time.Second, 0)
	p.OpenFor(ctx, 6*time.Second, time.Duration(math.MaxInt64)) // past the clock's range
	_, _, err = p.Admit(ctx, time.Duration(1<<62))
	require.ErrorIs(t, err, sluice.ErrCircuitOpen)
}

// While OpenFor holds it, the dashboard and the metrics read the Policy
// open, with the time left as its next probe.
func TestAHeldPolicyReadsOpen(t *testing.T) {
	p, err := gobreakeradapter.New(gobreaker.Settings{Name: "dep"})
	require.NoError(t, err)
	b, ok := breakerview.Of(p).(breakerview.Breaker)
	require.True(t, ok)
	require.Equal(t, breaker.StateClosed, b.State())
	p.OpenFor(context.Background(), monoclock.Now(), time.Minute)
	require.Equal(t, breaker.StateOpen, b.State())
	require.InDelta(t, time.Minute, b.Counts().NextProbe, float64(time.Second))
}
