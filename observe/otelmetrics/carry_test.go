package otelmetrics_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/observe/otelmetrics"
	"github.com/sluice-go/sluice/ratelimit"
	"github.com/sluice-go/sluice/rules"
)

// apiGuard returns a Guard named api that m reports: a fixed window of 4
// requests a minute.
func apiGuard(t *testing.T, m *otelmetrics.Metrics) *sluice.Guard {
	t.Helper()
	limit, err := ratelimit.NewFixedWindow(4, time.Minute, ratelimit.WithName("ratelimit/api"))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(limit),
		sluice.WithClock(sluice.NewManualClock(time.Second)), sluice.WithObserver(m))
	require.NoError(t, err)
	return g
}

// starts collects reader and returns the start time of each point of the
// counter name.
func starts(t *testing.T, reader *sdkmetric.ManualReader, name string) map[string]time.Time {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]time.Time{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, p := range s.DataPoints {
					out[key(p.Attributes)] = p.StartTime
				}
			}
		}
	}
	return out
}

const (
	apiAdmitted = "sluice.guard=api,sluice.policy=ratelimit/api,sluice.result=admitted"
	apiRejected = "sluice.cause=rate_limited,sluice.guard=api,sluice.policy=ratelimit/api,sluice.result=rejected"
)

// A Guard that succeeds a closed one of its name (a rules reload rebuilds
// one so) continues its counters and histograms: the calls the old one
// counted after the last collection are not lost, and no series goes back.
func TestASuccessorContinuesTheCountsOfItsName(t *testing.T) {
	m, reader := newReader(t)
	g := apiGuard(t, m)
	runDo(t, g)
	first := starts(t, reader, "sluice.requests")[apiAdmitted]
	runDo(t, g) // all 6 rejected: the window is spent
	require.NoError(t, g.Close())

	g = apiGuard(t, m)
	defer g.Close()
	runDo(t, g) // 4 admitted, 2 rejected
	got := points(t, reader, "sluice.requests")
	assert.Equal(t, 8.0, got[apiAdmitted])
	assert.Equal(t, 10.0, got[apiRejected])
	assert.Equal(t, 8.0, points(t, reader, "sluice.call.duration")["sluice.guard=api,sluice.outcome=success"]+
		points(t, reader, "sluice.call.duration")["error.type=_OTHER,sluice.guard=api,sluice.outcome=failure"])
	assert.Equal(t, first, starts(t, reader, "sluice.requests")[apiAdmitted], "the series keeps its start")

	// Once folded, the old Guard's counts stay.
	runDo(t, g)
	assert.Equal(t, 16.0, points(t, reader, "sluice.requests")[apiRejected])
}

// A Guard closed for good reports the calls it counted since the last
// collection once more, at the next one, and then no more.
func TestAClosedGuardReportsItsLastCountsOnce(t *testing.T) {
	m, reader := newReader(t)
	g := apiGuard(t, m)
	runDo(t, g)
	assert.Equal(t, 4.0, points(t, reader, "sluice.requests")[apiAdmitted])
	runDo(t, g)
	require.NoError(t, g.Close())
	got := points(t, reader, "sluice.requests")
	assert.Equal(t, 4.0, got[apiAdmitted])
	assert.Equal(t, 8.0, got[apiRejected])
	assert.Empty(t, points(t, reader, "sluice.requests"))
	assert.Empty(t, points(t, reader, "sluice.rate_limiter.keys"))
}

// A call under way when its Guard closes still counts when it ends,
// after the collection that followed the close: the closed Guard is
// reported until its calls have ended, or its successor carries them.
func TestACallEndingAfterItsGuardClosedCounts(t *testing.T) {
	duration := func(t *testing.T, reader *sdkmetric.ManualReader) float64 {
		return points(t, reader, "sluice.call.duration")["sluice.guard=api,sluice.outcome=success"]
	}
	for _, successor := range []bool{false, true} {
		t.Run(fmt.Sprint("successor=", successor), func(t *testing.T) {
			m, reader := newReader(t)
			g := apiGuard(t, m)
			var call sluice.Call
			require.NoError(t, g.Begin(context.Background(), &call))
			require.NoError(t, g.Close())
			if successor {
				g2 := apiGuard(t, m)
				defer g2.Close()
			}
			assert.Zero(t, duration(t, reader), "under way")
			require.NoError(t, call.End(nil))
			assert.Equal(t, 1.0, duration(t, reader), "ended after the close")
			if !successor {
				assert.Empty(t, points(t, reader, "sluice.requests"), "then reported no more")
			} else {
				assert.Equal(t, 1.0, duration(t, reader), "carried on")
			}
		})
	}
}

// A series the closed Guard had and its successor lacks (a policy renamed
// by a reload) keeps its last value.
func TestASeriesOnlyThePredecessorHadKeepsItsValue(t *testing.T) {
	m, reader := newReader(t)
	g := apiGuard(t, m)
	runDo(t, g)
	require.NoError(t, g.Close())
	limit, err := ratelimit.NewFixedWindow(4, time.Minute, ratelimit.WithName("ratelimit/v2"))
	require.NoError(t, err)
	g, err = sluice.New(sluice.WithName("api"), sluice.With(limit), sluice.WithObserver(m))
	require.NoError(t, err)
	defer g.Close()
	runDo(t, g)
	for range 2 {
		got := points(t, reader, "sluice.requests")
		assert.Equal(t, 4.0, got[apiAdmitted])
		assert.Equal(t, 2.0, got[apiRejected])
		assert.Equal(t, 4.0, got["sluice.guard=api,sluice.policy=ratelimit/v2,sluice.result=admitted"])
	}
}

// The resources a Guard's predecessors reported count against its
// MaxResources: Guards rebuilt again and again cannot grow the series by
// resource without bound.
func TestCarriedResourcesKeepToMaxResources(t *testing.T) {
	m, reader := newReader(t, otelmetrics.WithResourceAttribute("http.route"))
	for gen := range 3 {
		g, err := sluice.New(sluice.WithName("api"), sluice.WithObserver(m))
		require.NoError(t, err)
		for i := range otelmetrics.MaxResources {
			ctx := sluice.WithResource(t.Context(), fmt.Sprintf("GET /gen%d/%d", gen, i))
			require.NoError(t, g.Do(ctx, func(context.Context) error { return nil }))
		}
		require.NoError(t, g.Close())
	}
	g, err := sluice.New(sluice.WithName("api"), sluice.WithObserver(m))
	require.NoError(t, err)
	defer g.Close()
	routes := 0
	total := 0.0
	for k, v := range points(t, reader, "sluice.call.duration") {
		if strings.Contains(k, "http.route=") {
			routes++
			total += v
		}
	}
	assert.LessOrEqual(t, routes, otelmetrics.MaxResources+1, "MaxResources routes, and _OTHER")
	assert.Equal(t, float64(3*otelmetrics.MaxResources), total, "every call counted")
}

// Two policies of one name report one series twice; what a successor
// carries of them is their sum, added once: no count goes back.
func TestCarryOfTwoPoliciesOfOneName(t *testing.T) {
	m, reader := newReader(t)
	mk := func() *sluice.Guard {
		wide, err := ratelimit.NewFixedWindow(100, time.Minute, ratelimit.WithName("rl"))
		require.NoError(t, err)
		narrow, err := ratelimit.NewFixedWindow(2, time.Minute, ratelimit.WithName("rl"))
		require.NoError(t, err)
		g, err := sluice.New(sluice.WithName("api"), sluice.With(wide, narrow),
			sluice.WithClock(sluice.NewManualClock(time.Second)), sluice.WithObserver(m))
		require.NoError(t, err)
		return g
	}
	sums := func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		out := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, mt := range sm.Metrics {
				if s, ok := mt.Data.(metricdata.Sum[int64]); ok && mt.Name == "sluice.requests" {
					for _, p := range s.DataPoints {
						out[key(p.Attributes)] += p.Value
					}
				}
			}
		}
		return out
	}
	g := mk()
	runDo(t, g)
	before := sums()
	require.NoError(t, g.Close())
	g = mk() // no calls: it only carries the closed one's counts
	defer g.Close()
	assert.Equal(t, before, sums())
}

// refuseNext is an Observer whose next Attach fails once armed: it makes a
// rules load fail after the loader closed the Guard it rebuilds.
type refuseNext struct{ armed *atomic.Bool }

func (r refuseNext) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	if r.armed.CompareAndSwap(true, false) {
		return nil, nil, errors.New("refused")
	}
	return nil, nil, nil
}

// A rules load that fails after closing the Guard it rebuilds makes that
// Guard again, with its counts; the metrics, which carry a closed Guard's
// counts on to its successor themselves, count each call once: those made
// before the load, one under way across it, and those after.
func TestAGuardMadeAgainByAFailedLoadCountsEachCallOnce(t *testing.T) {
	m, reader := newReader(t)
	var refuse atomic.Bool
	path := filepath.Join(t.TempDir(), "rules.yaml")
	v1 := "guards:\n  api:\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault: api\n"
	require.NoError(t, os.WriteFile(path, []byte(v1), 0o644))
	l, err := rules.New(path, rules.WithGuardOptions(func(string) []sluice.Option {
		return []sluice.Option{sluice.WithObserver(m), sluice.WithObserver(refuseNext{&refuse})}
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	g, _ := l.Guard("api")
	ok := func(context.Context) error { return nil }
	for range 3 {
		require.NoError(t, g.Do(context.Background(), ok))
	}
	const admitted = "sluice.guard=api,sluice.policy=bucket,sluice.result=admitted"
	const succeeded = "sluice.guard=api,sluice.outcome=success"
	assert.Equal(t, 3.0, points(t, reader, "sluice.requests")[admitted])

	var under sluice.Call
	require.NoError(t, g.Begin(context.Background(), &under)) // under way across the load
	v2 := strings.Replace(v1, "default:", "      - {name: other, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault:", 1)
	require.NoError(t, os.WriteFile(path, []byte(v2), 0o644))
	refuse.Store(true)
	require.Error(t, l.Reload())
	g2, _ := l.Guard("api")
	require.NotSame(t, g, g2)
	assert.Equal(t, uint64(3), g2.Stats().Policies[0].Admitted, "the Guard made again has the calls that ended")
	assert.Equal(t, 4.0, points(t, reader, "sluice.requests")[admitted])
	require.NoError(t, under.End(nil))
	require.NoError(t, g2.Do(context.Background(), ok))
	assert.Equal(t, 5.0, points(t, reader, "sluice.requests")[admitted])
	assert.Equal(t, 5.0, points(t, reader, "sluice.call.duration")[succeeded])
}

// holdEnd is an Observer whose observe, for the Guard it is given first,
// stops at the first call's end until released: the observers after it
// (the metrics) hear that end only then.
type holdEnd struct{ entered, release chan struct{} }

func (h holdEnd) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return func(context.Context, sluice.CallEvent) {
		h.entered <- struct{}{}
		<-h.release
	}, nil, nil
}

// With a resource attribute, sluice.call.duration is the metrics' own,
// recorded when they hear a call's end, after the Guard's Stats count it
// (and, here, after another observer): a closed Guard is read until they
// have heard its last call, which a collection in between does not lose.
// The Guard has no policy: its call under way shows in no policy's Stats.
func TestTheLastCallOfAClosedGuardHeardLateCounts(t *testing.T) {
	m, reader := newReader(t, otelmetrics.WithResourceAttribute("http.route"))
	h := holdEnd{make(chan struct{}), make(chan struct{})}
	g1, err := sluice.New(sluice.WithName("api"), sluice.WithObserver(h), sluice.WithObserver(m))
	require.NoError(t, err)
	ctx := sluice.WithResource(context.Background(), "GET /x")
	var call sluice.Call
	require.NoError(t, g1.Begin(ctx, &call))
	require.NoError(t, g1.Close())
	g2, err := sluice.New(sluice.WithName("api"), sluice.WithObserver(m))
	require.NoError(t, err)
	defer g2.Close()

	const series = "http.route=GET /x,sluice.guard=api,sluice.outcome=success"
	assert.Zero(t, points(t, reader, "sluice.call.duration")[series], "under way")
	done := make(chan struct{})
	go func() { defer close(done); _ = call.End(nil) }()
	<-h.entered // counted in g1's Stats; the metrics have not heard it yet
	_ = points(t, reader, "sluice.call.duration")
	close(h.release)
	<-done
	assert.Equal(t, 1.0, points(t, reader, "sluice.call.duration")[series], "the call's duration, heard after g1 looked settled")
}
