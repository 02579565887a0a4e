package dashboard

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/ratelimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errDown = errors.New("dependency down")

// fixture is a Dashboard showing one Guard, "pay", with a token bucket, a
// keyed limiter, a bulkhead and a breaker, outer to inner.
type fixture struct {
	d      *Dashboard
	g      *sluice.Guard
	bucket *ratelimit.TokenBucket
	keyed  *ratelimit.Keyed
	br     *breaker.Breaker
}

func newFixture(t *testing.T, opts ...Option) *fixture {
	t.Helper()
	d, err := New(opts...)
	require.NoError(t, err)
	f := &fixture{d: d}
	f.bucket, err = ratelimit.NewTokenBucket(ratelimit.PerSecond(100), 100, ratelimit.WithName("global"))
	require.NoError(t, err)
	f.keyed, err = ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewTokenBucket(ratelimit.Rate{Count: 2, Period: time.Minute}, 2)
	}, ratelimit.WithName("per-client"))
	require.NoError(t, err)
	bulk, err := adaptive.NewBulkhead(10, adaptive.WithName("bulkhead"))
	require.NoError(t, err)
	f.br, err = breaker.New("payments", breaker.WithConsecutiveFailures(3), breaker.WithOpenDuration(time.Minute))
	require.NoError(t, err)
	f.g, err = sluice.New(sluice.WithName("pay"), sluice.With(f.bucket, f.keyed, bulk, f.br), sluice.WithObserver(d))
	require.NoError(t, err)
	t.Cleanup(func() { f.g.Close() })
	return f
}

// call makes one call through the Guard as client key, failing or not.
func (f *fixture) call(key string, fail bool) error {
	return f.g.Do(sluice.WithKey(context.Background(), key), func(context.Context) error {
		time.Sleep(3 * time.Millisecond) // the call's latency, on the bubble's clock
		if fail {
			return errDown
		}
		return nil
	})
}

func getState(t *testing.T, h http.Handler) state {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/sluice/api/state", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var s state
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &s))
	return s
}

func TestNewRefusesBadOptions(t *testing.T) {
	sw, err := degrade.NewSwitch("s")
	require.NoError(t, err)
	for name, opt := range map[string]Option{
		"nil option":        nil,
		"nil authorizer":    WithAuthorizer(nil),
		"nil logger":        WithLogger(nil),
		"nil switch":        WithSwitches(sw, nil),
		"nil rules":         WithRules(nil),
		"nil cpu":           WithCPU(nil),
		"duplicate switche": WithSwitches(sw, sw),
	} {
		t.Run(name, func(t *testing.T) {
			d, err := New(opt)
			require.Error(t, err)
			assert.Nil(t, d)
			assert.True(t, strings.HasPrefix(err.Error(), "dashboard: "), err.Error())
		})
	}
}

func TestAttachRefusesUnnamedAndDuplicateGuards(t *testing.T) {
	d, err := New()
	require.NoError(t, err)
	shown := func() (names []string) {
		for _, g := range getState(t, d).Guards {
			names = append(names, g.Name)
		}
		return names
	}
	guard := func(opts ...sluice.Option) (*sluice.Guard, error) {
		return sluice.New(append(opts, sluice.WithObserver(d))...)
	}
	_, err = guard()
	require.ErrorContains(t, err, "no name")
	b, err := guard(sluice.WithName("b"))
	require.NoError(t, err)
	defer b.Close()
	a, err := guard(sluice.WithName("a"))
	require.NoError(t, err)
	_, err = guard(sluice.WithName("a"))
	require.ErrorContains(t, err, `"a" is shown already`)
	assert.Equal(t, []string{"a", "b"}, shown(), "by name")

	require.NoError(t, a.Close())
	assert.Equal(t, []string{"b"}, shown(), "a closed Guard leaves the page")
	a, err = guard(sluice.WithName("a"))
	require.NoError(t, err, "and its name is free again")
	defer a.Close()
	assert.Equal(t, []string{"a", "b"}, shown())
}

func TestSnapshotShowsGuardsPoliciesChartAndEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second))) // a whole second starts
		for range 3 {                                                             // 2 admitted, 1 rate limited
			_ = f.call("alice", false)
		}
		for i := range 4 { // 3 failures open the breaker; the 4th is rejected
			_ = f.call(fmt.Sprint("bob", i), true)
		}
		for i := range 5 { // distinct keys, each admitted once, all rejected by the open breaker
			_ = f.call(fmt.Sprint("c", i), false)
		}
		time.Sleep(time.Second)

		s := getState(t, f.d)
		require.Len(t, s.Guards, 1)
		g := s.Guards[0]
		assert.Equal(t, "pay", g.Name)
		assert.Equal(t, uint64(5), g.Admitted)
		assert.Equal(t, map[string]uint64{"rate-limited": 1, "circuit-open": 6}, g.Rejected)
		require.Len(t, g.Policies, 4)
		kinds := []string{}
		for _, p := range g.Policies {
			kinds = append(kinds, p.Kind)
		}
		assert.Equal(t, []string{"ratelimit.TokenBucket", "ratelimit.Keyed", "adaptive.Shedder", "breaker.Breaker"}, kinds)

		bucket, keyed, bulk, br := g.Policies[0], g.Policies[1], g.Policies[2], g.Policies[3]
		assert.Equal(t, uint64(12), bucket.Admitted)
		assert.Contains(t, bucket.Details, detail{"burst", "100"})
		assert.Equal(t, map[string]uint64{"rate-limited": 1}, keyed.Rejected)
		assert.Contains(t, keyed.Details, detail{"keys", "10"})
		assert.Equal(t, []keyCount{{"alice", 1}}, keyed.TopKeys)
		assert.Equal(t, "normal", bulk.State)
		assert.Contains(t, bulk.Details, detail{"limit", "10"})
		assert.Equal(t, "breaker/payments", br.Name)
		assert.Equal(t, "open", br.State)
		assert.Contains(t, br.Details, detail{"for", "1s"}, "since it opened")
		assert.Contains(t, br.Details, detail{"next probe in", "59s"}, "open for a minute")
		assert.Equal(t, map[string]uint64{"circuit-open": 6}, br.Rejected)
		assert.Empty(t, br.Actions, "no authorizer: no actions")
		assert.False(t, s.Actions.Enabled)

		// The chart's last point is the second the calls came in.
		c := s.Chart
		require.Len(t, c.Admitted, chartSeconds)
		assert.Equal(t, time.Now().Unix()-chartSeconds, c.Start)
		assert.Equal(t, uint64(5), c.Admitted[chartSeconds-1])
		require.Len(t, c.Rejected["rate-limited"], chartSeconds)
		require.Len(t, c.Rejected["circuit-open"], chartSeconds)
		assert.Equal(t, uint64(1), c.Rejected["rate-limited"][chartSeconds-1])
		assert.Equal(t, uint64(6), c.Rejected["circuit-open"][chartSeconds-1])
		assert.InDelta(t, 3.0, c.P50[chartSeconds-1], 0.6, "3 ms calls")
		assert.InDelta(t, 3.0, c.P99[chartSeconds-1], 0.6)
		assert.Zero(t, c.Admitted[0])

		require.Len(t, s.Events, 1)
		e := s.Events[0]
		assert.Equal(t, "state", e.Kind)
		assert.Equal(t, "pay", e.Guard)
		assert.Equal(t, "breaker/payments", e.Policy)
		assert.Equal(t, "closed → open", e.Text)
		assert.Equal(t, time.Now().Add(-time.Second).Unix(), e.Time.Unix())

		// A minute later the calls have left the chart.
		time.Sleep(chartSeconds * time.Second)
		c = getState(t, f.d).Chart
		assert.Equal(t, make([]uint64, chartSeconds), c.Admitted)
		assert.Empty(t, c.Rejected)
	})
}

func TestLimitersShowTheirQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, err := New()
		require.NoError(t, err)
		fixed, err := ratelimit.NewFixedWindow(5, time.Minute, ratelimit.WithName("fixed"))
		require.NoError(t, err)
		gcra, err := ratelimit.NewGCRA(ratelimit.PerSecond(10), 20, ratelimit.WithName("gcra"))
		require.NoError(t, err)
		g, err := sluice.New(sluice.WithName("g"), sluice.With(gcra, fixed), sluice.WithObserver(d))
		require.NoError(t, err)
		defer g.Close()
		perKey, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
			return ratelimit.NewSlidingLog(2, time.Hour)
		}, ratelimit.WithName("per-key"))
		require.NoError(t, err)
		k, err := sluice.New(sluice.WithName("k"), sluice.With(perKey), sluice.WithObserver(d))
		require.NoError(t, err)
		defer k.Close()
		figures := func(guard, policy int) map[string]string {
			m := map[string]string{}
			for _, dt := range getState(t, d).Guards[guard].Policies[policy].Details {
				m[dt.Name] = dt.Value
			}
			return m
		}
		ok := func(context.Context) error { return nil }
		assert.Empty(t, figures(0, 1), "nothing decided yet")
		for range 3 {
			require.NoError(t, g.Do(context.Background(), ok))
		}
		// The fixed window has the least left: the admitted calls tell its quota.
		f := figures(0, 1)
		reset, err := time.ParseDuration(f["reset in"])
		require.NoError(t, err, "the time until the window ends")
		assert.Positive(t, reset)
		assert.LessOrEqual(t, reset, time.Minute)
		delete(f, "reset in")
		assert.Equal(t, map[string]string{"limit": "5", "window": "1m0s", "remaining": "2"}, f)
		for range 3 { // two more admitted, then it rejects
			_ = g.Do(context.Background(), ok)
		}
		assert.Equal(t, "0", figures(0, 1)["remaining"])
		assert.Equal(t, uint64(1), getState(t, d).Guards[0].Policies[1].Rejected["rate-limited"])

		for i := range 3 {
			_ = k.Do(sluice.WithKey(context.Background(), fmt.Sprint(i%2)), ok)
		}
		assert.Equal(t, map[string]string{"keys": "2", "limit per key": "2", "window": "1h0m0s"}, figures(1, 0))
	})
}

func TestLoadGuardShowsTheCPU(t *testing.T) {
	f := newFixture(t, WithCPU(func() float64 { return 0.42 }))
	bulk := getState(t, f.d).Guards[0].Policies[2]
	assert.Contains(t, bulk.Details, detail{"CPU", "42%"})
	for _, dt := range getState(t, newFixture(t).d).Guards[0].Policies[2].Details {
		assert.NotEqual(t, "CPU", dt.Name, "no WithCPU, no CPU")
	}
}

func TestShadowRejectionsAreCharted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, err := New()
		require.NoError(t, err)
		one, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1, ratelimit.WithName("one"))
		require.NoError(t, err)
		g, err := sluice.New(sluice.WithName("g"), sluice.With(one), sluice.WithShadow("one"), sluice.WithObserver(d))
		require.NoError(t, err)
		defer g.Close()
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		for range 3 {
			require.NoError(t, g.Do(context.Background(), func(context.Context) error { return nil }))
		}
		time.Sleep(time.Second)
		s := getState(t, d)
		assert.Equal(t, uint64(3), s.Chart.Admitted[chartSeconds-1])
		require.Len(t, s.Chart.Shadow, chartSeconds)
		assert.Equal(t, uint64(2), s.Chart.Shadow[chartSeconds-1], "two would have been rejected")
		assert.Empty(t, s.Chart.Rejected)
		assert.Equal(t, uint64(2), s.Guards[0].Policies[0].ShadowRejected)
		assert.True(t, s.Guards[0].Policies[0].Shadowed)
		assert.False(t, s.Guards[0].Shadowed, "shadowed by name, not as a whole")
		require.NoError(t, g.SetShadow("", true))
		assert.True(t, getState(t, d).Guards[0].Shadowed)
	})
}

func TestFallbacksAndRulesShowAsEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		version, reloadErr := "v1", error(nil)
		d, err := New(WithRules(func() (string, time.Time, error) { return version, time.Unix(1e9, 0), reloadErr }))
		require.NoError(t, err)
		fb, err := degrade.New(degrade.OnError(degrade.Value(struct{}{})))
		require.NoError(t, err)
		g, err := sluice.New(sluice.WithName("fb"), sluice.WithFallback(fb), sluice.WithObserver(d))
		require.NoError(t, err)
		defer g.Close()
		for range 2 {
			require.NoError(t, g.Do(context.Background(), func(context.Context) error { return errDown }))
		}
		s := getState(t, d)
		require.NotNil(t, s.Rules)
		assert.Equal(t, "v1", s.Rules.Version)
		assert.True(t, time.Unix(1e9, 0).Equal(s.Rules.Loaded), s.Rules.Loaded)
		assert.Empty(t, s.Rules.Error)
		assert.Equal(t, uint64(2), s.Guards[0].Fallbacks)
		texts := []string{}
		for _, e := range s.Events {
			texts = append(texts, e.Kind+": "+e.Text)
		}
		assert.Equal(t, []string{"reload: rules v1 in force", "fallback: 2 answered by a fallback (other)"}, texts)

		reloadErr = errors.New("line 3: negative rate")
		s = getState(t, d)
		assert.Equal(t, "line 3: negative rate", s.Rules.Error)
		assert.Equal(t, "reload: reload failed, rules v1 stay in force: line 3: negative rate", s.Events[0].Kind+": "+s.Events[0].Text)
		assert.Len(t, getState(t, d).Events, 3, "an unchanged status adds no event")
	})
}

func TestEventsKeepTheLast100NewestFirst(t *testing.T) {
	var l events
	for i := range 250 {
		l.add(event{Text: fmt.Sprint(i)})
	}
	got := l.last()
	require.Len(t, got, maxEvents)
	assert.Equal(t, "249", got[0].Text)
	assert.Equal(t, "150", got[maxEvents-1].Text)

	// The same event again and again is counted, and pushes out nothing.
	t0 := time.Unix(1e9, 0)
	for i := range 1000 {
		l.add(event{Time: t0.Add(time.Duration(i) * time.Second), Kind: "refused", Text: "open pay 1: refused: cross-origin request"})
	}
	got = l.last()
	require.Len(t, got, maxEvents)
	assert.Equal(t, event{Time: t0.Add(999 * time.Second), Kind: "refused", Text: "open pay 1: refused: cross-origin request", Times: 1000}, got[0])
	assert.Equal(t, "249", got[1].Text)
	assert.Equal(t, "151", got[maxEvents-1].Text)

	// Refused actions of many texts (a page of another site can send them
	// at will) are kept apart: they push out no other event.
	for i := range 1000 {
		l.add(event{Time: t0.Add(time.Duration(1000+i) * time.Second), Kind: "refused", Text: fmt.Sprint("open", i%2)})
	}
	got = l.last()
	require.Len(t, got, maxEvents)
	refused := 0
	for _, e := range got {
		if e.Kind == "refused" {
			refused++
		}
	}
	assert.Equal(t, maxRefused, refused)
	assert.Equal(t, "249", got[maxRefused].Text, "the other events stay, newest first after the refusals")
}

func TestLatencyBuckets(t *testing.T) {
	// Bucket b holds [latUpper(b-1), latUpper(b)).
	for _, d := range []time.Duration{0, 1023, 1024, 1500, time.Millisecond, 3 * time.Millisecond, time.Second, 10 * time.Minute} {
		b := latBucket(d)
		assert.Greater(t, latUpper(b), d, "%v in bucket %d", d, b)
		if b > 0 {
			assert.LessOrEqual(t, latUpper(b-1), d, "%v in bucket %d", d, b)
			assert.LessOrEqual(t, float64(latUpper(b)), 1.25*float64(d)+1, "buckets are 4 to an octave")
		}
	}
	assert.Equal(t, latBuckets-1, latBucket(1<<62))
	var lat [latBuckets]uint32
	lat[latBucket(time.Millisecond)] = 98
	lat[latBucket(100*time.Millisecond)] = 2
	assert.InDelta(t, 1.0, quantile(&lat, 100, 0.5), 0.25)
	assert.InDelta(t, 100.0, quantile(&lat, 100, 0.99), 25)
	assert.Zero(t, quantile(&lat, 0, 0.5))
}

func TestTopKeysStayBounded(t *testing.T) {
	var tk topKeys
	for range 50 {
		tk.add("hot")
	}
	for i := range 100_000 {
		tk.add(fmt.Sprint("cold", i))
	}
	assert.LessOrEqual(t, len(tk.counts), keysTracked)
	top := tk.top()
	require.Len(t, top, topN)
	assert.Equal(t, "hot", top[0].Key, "a key rejected often stays on top")
}

// TestSnapshotIsBoundedWith50GuardsOf10000Keys: the snapshot shows 10 keys
// per keyed limiter whatever their number, and stays small.
func TestSnapshotIsBoundedWith50GuardsOf10000Keys(t *testing.T) {
	d := manyGuards(t, 50, 10_000)
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/state", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var s state
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &s))
	require.Len(t, s.Guards, 50)
	for _, g := range s.Guards {
		p := g.Policies[0]
		assert.Contains(t, p.Details, detail{"keys", "10000"})
		assert.Len(t, p.TopKeys, topN)
		assert.Equal(t, uint64(10_000), p.Rejected["rate-limited"])
	}
	assert.Less(t, rec.Body.Len(), 256<<10, "the snapshot stays small")
}

// manyGuards returns a Dashboard showing guards Guards, each with a keyed
// limiter that has rejected keys keys once each.
func manyGuards(tb testing.TB, guards, keys int) *Dashboard {
	d, err := New()
	require.NoError(tb, err)
	ctxs := make([]context.Context, keys)
	for j := range ctxs {
		ctxs[j] = sluice.WithKey(context.Background(), fmt.Sprint("client-", j))
	}
	fn := func(context.Context) error { return nil }
	for i := range guards {
		k, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) { return refuseAll{}, nil },
			ratelimit.WithMaxKeys(2*keys))
		require.NoError(tb, err)
		g, err := sluice.New(sluice.WithName(fmt.Sprint("guard-", i)), sluice.With(k), sluice.WithObserver(d))
		require.NoError(tb, err)
		tb.Cleanup(func() { g.Close() })
		for _, ctx := range ctxs {
			_ = g.Do(ctx, fn)
		}
	}
	return d
}

// refuseAll is a limiter that refuses every call.
type refuseAll struct{}

func (refuseAll) Name() string { return "refuse-all" }
func (refuseAll) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: 0}, sluice.ErrRateLimited
}
func (refuseAll) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (refuseAll) Needs() sluice.Needs                                              { return 0 }

func BenchmarkSnapshot50Guards10000Keys(b *testing.B) {
	d := manyGuards(b, 50, 10_000)
	req := httptest.NewRequest(http.MethodGet, "/api/state", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, req)
	}
}

func TestPageAndAssets(t *testing.T) {
	for _, actions := range []bool{false, true} {
		var opts []Option
		if actions {
			opts = append(opts, WithAuthorizer(func(*http.Request) bool { return true }))
		}
		d, err := New(opts...)
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/sluice/", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		body := rec.Body.String()
		assert.Contains(t, body, fmt.Sprintf(`data-actions="%t"`, actions))
		assert.Regexp(t, `data-token="[A-Za-z0-9_-]{54}"`, body)
		assert.Contains(t, rec.Header().Get("Content-Security-Policy"), "default-src 'self'")
		assert.NotContains(t, body, "http://", "nothing loads from elsewhere")
		assert.NotContains(t, body, "https://")
	}
	d, err := New()
	require.NoError(t, err)
	for path, ctype := range map[string]string{"/x/app.js": "text/javascript", "/x/app.css": "text/css"} {
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusOK, rec.Code, path)
		assert.Contains(t, rec.Header().Get("Content-Type"), ctype)
		assert.NotEmpty(t, rec.Body.String())
	}
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/x/api/state", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}

// pipeWriter is a ResponseWriter whose body a test reads as it is written.
type pipeWriter struct {
	h http.Header
	w *io.PipeWriter
}

func (p *pipeWriter) Header() http.Header         { return p.h }
func (p *pipeWriter) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p *pipeWriter) WriteHeader(int)             {}
func (p *pipeWriter) Flush()                      {}

// readEvent reads one server-sent event and decodes its data.
func readEvent(t *testing.T, r *bufio.Reader) state {
	t.Helper()
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "event: state\n", line)
	line, err = r.ReadString('\n')
	require.NoError(t, err)
	data, ok := strings.CutPrefix(line, "data: ")
	require.True(t, ok, line)
	var s state
	require.NoError(t, json.Unmarshal([]byte(data), &s))
	blank, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "\n", blank)
	return s
}

func TestStreamSendsEverySecondAndEndsWithTheClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		pr, pw := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/debug/sluice/api/events", nil)
		w := &pipeWriter{h: http.Header{}, w: pw}
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			f.d.ServeHTTP(w, req)
		}()
		r := bufio.NewReader(pr)
		start := time.Now()
		s := readEvent(t, r)
		assert.Equal(t, "text/event-stream", w.h.Get("Content-Type"))
		assert.Equal(t, start, time.Now(), "the first event comes at once")
		assert.Zero(t, s.Guards[0].Admitted)

		require.NoError(t, f.call("alice", false))
		s = readEvent(t, r)
		assert.Equal(t, start.Add(time.Second), time.Now(), "then one a second")
		assert.Equal(t, uint64(1), s.Guards[0].Admitted)
		readEvent(t, r)
		assert.Equal(t, start.Add(2*time.Second), time.Now())

		cancel()
		go io.Copy(io.Discard, pr) // an event may be under way
		<-ended
		pr.Close()
	})
}

// TestStreamEndsWhenTheClientLeaves runs the stream through a real server:
// when the client closes its connection, the handler returns and the
// server can close (goleak, in TestMain, checks nothing is left).
func TestStreamEndsWhenTheClientLeaves(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.d)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/events", nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	r := bufio.NewReader(resp.Body)
	s := readEvent(t, r)
	assert.Equal(t, "pay", s.Guards[0].Name)
	require.NoError(t, f.call("alice", false))
	assert.Equal(t, uint64(1), readEvent(t, r).Guards[0].Admitted) // a second later: a bounded real wait
	cancel()
	resp.Body.Close()
	srv.Close() // returns once the handler has
}

// post sends an admin action as the page does, with the headers given.
func post(d *Dashboard, form url.Values, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "http://dash.test/debug/sluice/api/action", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, req)
	return rec
}

func pageToken(t *testing.T, d *Dashboard) string {
	t.Helper()
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/sluice/", nil))
	_, rest, ok := strings.Cut(rec.Body.String(), `data-token="`)
	require.True(t, ok)
	tok, _, _ := strings.Cut(rest, `"`)
	return tok
}

func TestActionsAreForbiddenWithoutAnAuthorizer(t *testing.T) {
	var logs bytes.Buffer
	f := newFixture(t, WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	rec := post(f.d, url.Values{"token": {pageToken(t, f.d)}, "guard": {"pay"}, "policy": {"3"}, "action": {"open"}},
		"Sec-Fetch-Site", "same-origin")
	assert.Equal(t, http.StatusForbidden, rec.Code)
	assert.JSONEq(t, `{"ok":false,"text":"refused: admin actions are off"}`, rec.Body.String())
	assert.Equal(t, breaker.StateClosed, f.br.State())
	assert.Contains(t, logs.String(), `"msg":"sluice dashboard: action refused"`)
	s := getState(t, f.d)
	assert.Equal(t, actionsView{Enabled: false, Refused: 1}, s.Actions)
	assert.Equal(t, "refused", s.Events[0].Kind)

	req := httptest.NewRequest(http.MethodGet, "/debug/sluice/api/action?guard=pay&policy=3&action=open", nil)
	rec = httptest.NewRecorder()
	f.d.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.Equal(t, "POST", rec.Header().Get("Allow"))
}

func TestActions(t *testing.T) {
	var logs bytes.Buffer
	allow := true
	sw, err := degrade.NewSwitch("recommendations")
	require.NoError(t, err)
	f := newFixture(t, WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))),
		WithAuthorizer(func(r *http.Request) bool { return allow }), WithSwitches(sw), WithHosts("dash.test"))
	tok := pageToken(t, f.d)
	form := func(kv ...string) url.Values {
		v := url.Values{"token": {tok}}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		if i, err := strconv.Atoi(v.Get("policy")); err == nil { // the name the page shows with it
			for _, g := range getState(t, f.d).Guards {
				if g.Name == v.Get("guard") && i < len(g.Policies) {
					v.Set("name", g.Policies[i].Name)
				}
			}
		}
		return v
	}
	sameOrigin := []string{"Sec-Fetch-Site", "same-origin", "Origin", "http://dash.test"}

	rec := post(f.d, form("guard", "pay", "policy", "3", "action", "open"), sameOrigin...)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.JSONEq(t, `{"ok":true,"text":"pay/breaker/payments forced open"}`, rec.Body.String())
	assert.Equal(t, breaker.StateOpen, f.br.State())
	require.ErrorIs(t, f.call("x", false), sluice.ErrCircuitOpen)
	rec = post(f.d, form("guard", "pay", "policy", "3", "action", "close"), sameOrigin...)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, breaker.StateClosed, f.br.State())
	require.NoError(t, f.call("x", false))
	rec = post(f.d, form("guard", "pay", "policy", "3", "action", "reset"))
	require.Equal(t, http.StatusOK, rec.Code, "a request without browser headers is no cross-site one")

	// In shadow mode the per-client limiter lets through the call it
	// rejects, and counts it; enforcing again, it rejects.
	require.Equal(t, http.StatusOK, post(f.d, form("guard", "pay", "policy", "1", "action", "shadow"), sameOrigin...).Code)
	for range 3 {
		require.NoError(t, f.call("carol", false))
	}
	st := getState(t, f.d)
	assert.Equal(t, uint64(1), st.Guards[0].Policies[1].ShadowRejected)
	assert.True(t, st.Guards[0].Policies[1].Shadowed)
	assert.False(t, st.Guards[0].Policies[0].Shadowed)
	assert.False(t, st.Guards[0].Shadowed)
	require.Equal(t, http.StatusOK, post(f.d, form("guard", "pay", "policy", "1", "action", "enforce"), sameOrigin...).Code)
	assert.False(t, getState(t, f.d).Guards[0].Policies[1].Shadowed)
	require.ErrorIs(t, f.call("carol", false), sluice.ErrRateLimited)

	require.Equal(t, http.StatusOK, post(f.d, form("guard", "pay", "policy", "0", "action", "rate", "value", "7"), sameOrigin...).Code)
	require.Equal(t, http.StatusOK, post(f.d, form("guard", "pay", "policy", "0", "action", "burst", "value", "3"), sameOrigin...).Code)
	assert.Equal(t, ratelimit.PerSecond(7), f.bucket.Rate())
	assert.Equal(t, int64(3), f.bucket.Burst())

	require.Equal(t, http.StatusOK, post(f.d, form("switch", "recommendations", "action", "on"), sameOrigin...).Code)
	assert.True(t, sw.On())
	assert.True(t, sw.Pinned())

	for name, c := range map[string]struct {
		form    url.Values
		headers []string
		status  int
		text    string
	}{
		"cross-site":       {form("guard", "pay", "policy", "3", "action", "open"), []string{"Sec-Fetch-Site", "cross-site"}, 403, "refused: cross-origin request"},
		"foreign origin":   {form("guard", "pay", "policy", "3", "action", "open"), []string{"Origin", "http://evil.test"}, 403, "refused: cross-origin request"},
		"no token":         {url.Values{"guard": {"pay"}, "policy": {"3"}, "action": {"open"}}, sameOrigin, 403, "refused: no valid page token"},
		"forged token":     {form("token", forged(tok), "guard", "pay", "policy", "3", "action", "open"), sameOrigin, 403, "refused: no valid page token"},
		"unknown guard":    {form("guard", "nope", "policy", "3", "action", "open"), sameOrigin, 400, `no guard named "nope"`},
		"unknown policy":   {form("guard", "pay", "policy", "9", "action", "open"), sameOrigin, 400, `guard "pay" has no policy "9"`},
		"wrong kind":       {form("guard", "pay", "policy", "0", "action", "open"), sameOrigin, 400, `pay/global takes no action "open"`},
		"bad rate":         {form("guard", "pay", "policy", "0", "action", "rate", "value", "-1"), sameOrigin, 400, `rate: want a positive whole number, not "-1"`},
		"unknown switch":   {form("switch", "nope", "action", "on"), sameOrigin, 400, `no switch named "nope"`},
		"bad switch order": {form("switch", "recommendations", "action", "open"), sameOrigin, 400, `unknown action "open" on a switch`},
	} {
		t.Run(name, func(t *testing.T) {
			rec := post(f.d, c.form, c.headers...)
			assert.Equal(t, c.status, rec.Code)
			var j struct{ Text string }
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &j))
			assert.Equal(t, c.text, j.Text)
		})
	}
	assert.Equal(t, breaker.StateClosed, f.br.State(), "no refused action acted")

	allow = false
	rec = post(f.d, form("guard", "pay", "policy", "3", "action", "open"), sameOrigin...)
	assert.Equal(t, http.StatusForbidden, rec.Code)
	assert.Equal(t, breaker.StateClosed, f.br.State())

	s := getState(t, f.d)
	assert.Equal(t, actionsView{Enabled: true, Done: 8, Refused: 11}, s.Actions)
	assert.Equal(t, []string{"open", "close", "reset", "shadow", "enforce"}, s.Guards[0].Policies[3].Actions)
	assert.Equal(t, []string{"rate", "burst", "shadow", "enforce"}, s.Guards[0].Policies[0].Actions)
	assert.Equal(t, []string{"shadow", "enforce"}, s.Guards[0].Policies[1].Actions)
	assert.Equal(t, []switchView{{"recommendations", true, true}}, s.Switches)
	kinds := map[string]int{}
	for _, e := range s.Events {
		kinds[e.Kind] += e.Times // like refusals in a row are one event
	}
	// The 11 refusals, in the random order of the cases, make 10 or 11
	// runs of like refusals: the ring of refused actions keeps the last 10.
	refused := kinds["refused"]
	delete(kinds, "refused")
	assert.Equal(t, map[string]int{"action": 8, "state": 3}, kinds,
		"state changes: the breaker opened and closed, the switch turned on")
	assert.GreaterOrEqual(t, refused, maxRefused)
	assert.LessOrEqual(t, refused, 11)
	assert.Equal(t, 8, strings.Count(logs.String(), `"msg":"sluice dashboard: action taken"`))
	assert.Equal(t, 11, strings.Count(logs.String(), `"msg":"sluice dashboard: action refused"`))
}

func TestTokensExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, err := New(WithAuthorizer(func(*http.Request) bool { return true }))
		require.NoError(t, err)
		tok := d.token(time.Now())
		assert.True(t, d.validToken(tok, time.Now()))
		other, err := New()
		require.NoError(t, err)
		assert.False(t, other.validToken(tok, time.Now()), "another Dashboard's token")
		time.Sleep(tokenTTL)
		assert.False(t, d.validToken(tok, time.Now()))
		assert.False(t, d.validToken("not base64!", time.Now()))
	})
}

// The dashboard's server side is the standard library and sluice's core:
// a program that serves it pulls in nothing else.
func TestDashboardImportsOnlyTheStandardLibraryAndTheCore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	for _, dep := range strings.Fields(string(out)) {
		switch dep := strings.TrimPrefix(dep, "github.com/sluice-go/sluice"); {
		case strings.HasPrefix(dep, "/internal/"), strings.HasPrefix(dep, "/observe/dashboard/internal/"):
		case dep == "", dep == "/ratelimit", dep == "/breaker", dep == "/degrade", dep == "/adaptive", dep == "/observe/dashboard":
		default:
			t.Errorf("the dashboard depends on %s", dep)
		}
	}
}

// BenchmarkObserved runs a call through a Guard with a token bucket,
// unobserved and observed by a Dashboard, side by side.
func BenchmarkObserved(b *testing.B) {
	d, err := New()
	require.NoError(b, err)
	for _, observed := range []bool{false, true} {
		b.Run(fmt.Sprint("dashboard=", observed), func(b *testing.B) {
			bucket, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1e9), 1e9)
			require.NoError(b, err)
			opts := []sluice.Option{sluice.WithName("g"), sluice.With(bucket)}
			if observed {
				opts = append(opts, sluice.WithObserver(d))
			}
			g, err := sluice.New(opts...)
			require.NoError(b, err)
			defer g.Close()
			ctx := context.Background()
			fn := func(context.Context) error { return nil }
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_ = g.Do(ctx, fn)
				}
			})
		})
	}
}

// forged returns tok with its signature's last two characters changed:
// "AA", unless they are "AA" already (one token in 256), which would
// leave it the page's own.
func forged(tok string) string {
	end := "AA"
	if strings.HasSuffix(tok, end) {
		end = "QA"
	}
	return tok[:len(tok)-2] + end
}

// With ten calls in a second, one of them slow, the chart's p99 must show
// the slow one: by nearest rank the 99th percentile of ten values is the
// tenth, and by any interpolation it is far above the nine fast ones.
func TestP99OfFewCallsShowsTheSlowOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s series
		s.init()
		// Align to the start of a whole second.
		time.Sleep(time.Duration(int64(time.Second) - time.Now().UnixNano()%int64(time.Second)))
		for range 9 {
			s.add(&sluice.CallEvent{Admitted: true, Latency: time.Millisecond})
		}
		s.add(&sluice.CallEvent{Admitted: true, Latency: time.Second})
		time.Sleep(time.Second)
		c := s.chart()
		last := len(c.P99) - 1
		if c.Admitted[last] != 10 {
			t.Fatalf("admitted in the last whole second = %d, want 10", c.Admitted[last])
		}
		if c.P99[last] < 500 {
			t.Errorf("p99 of nine calls of 1ms and one of 1s = %vms; want about 1000ms (the slow call hidden)", c.P99[last])
		}
	})
}
