package routing

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policywindow"
	"github.com/sluice-go/sluice/middleware/internal/sfv"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
	"github.com/sluice-go/sluice/ratelimit"
)

func TestRejectedFieldsPerCause(t *testing.T) {
	tests := []struct {
		name       string
		d          sluice.Decision
		status     int
		retryAfter string
		quota      bool
	}{
		{
			name:   "rate limited",
			d:      sluice.Decision{Policy: "ratelimit/per-ip", Limit: 100, Remaining: 0, Reset: 40 * time.Second, RetryAfter: 6200 * time.Millisecond, Cause: sluice.ErrRateLimited},
			status: 429, retryAfter: "7", quota: true,
		},
		{
			name:   "circuit open",
			d:      sluice.Decision{Policy: "breaker/payments", Limit: -1, RetryAfter: 30 * time.Second, Cause: sluice.ErrCircuitOpen},
			status: 503, retryAfter: "30",
		},
		{
			name:   "overloaded, retry unknown",
			d:      sluice.Decision{Policy: "adaptive/bbr", Limit: -1, Cause: sluice.ErrOverloaded},
			status: 503, retryAfter: "1",
		},
		{
			name:   "concurrency limited",
			d:      sluice.Decision{Policy: "adaptive/concurrency", Limit: -1, RetryAfter: time.Nanosecond, Cause: sluice.ErrConcurrencyLimited},
			status: 503, retryAfter: "1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := newRoute("GET /x", testpolicy.MustGuard(t, testpolicy.Window("ratelimit/per-ip", time.Minute)))
			h := map[string][]string{}
			var r Renderer
			status := r.Rejected(h, rt, tt.d, true)
			assert.Equal(t, tt.status, status)
			assert.Equal(t, []string{tt.retryAfter}, h[FieldRetryAfter])
			assert.Equal(t, []string{ProblemContentType}, h["Content-Type"])
			assert.Equal(t, []string{"no-store"}, h["Cache-Control"])
			if !tt.quota {
				assert.NotContains(t, h, FieldRateLimit)
				assert.NotContains(t, h, FieldRateLimitPolicy)
				return
			}
			pol, err := sfv.ParseList(h[FieldRateLimitPolicy][0])
			require.NoError(t, err)
			require.Len(t, pol, 1)
			assert.Equal(t, tt.d.Policy, pol[0].Value)
			q, _ := pol[0].Int("q")
			w, _ := pol[0].Int("w")
			assert.EqualValues(t, 100, q)
			assert.EqualValues(t, 60, w)
			rl, err := sfv.ParseList(h[FieldRateLimit][0])
			require.NoError(t, err)
			require.Len(t, rl, 1)
			r0, _ := rl[0].Int("r")
			tp, _ := rl[0].Int("t")
			assert.EqualValues(t, 0, r0)
			ra, err := strconv.ParseInt(h[FieldRetryAfter][0], 10, 64)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, ra, tp)
			assert.EqualValues(t, 7, tp)
		})
	}
}

func TestAdmittedFields(t *testing.T) {
	d := sluice.Decision{Allowed: true, Policy: `odd"name\`, Limit: 10, Remaining: 3, Reset: 1500 * time.Millisecond}
	h := map[string][]string{}
	r := Renderer{Legacy: true}
	r.Admitted(h, nil, d)
	assert.Equal(t, []string{`"odd\"name\\";q=10`}, h[FieldRateLimitPolicy])
	assert.Equal(t, []string{`"odd\"name\\";r=3;t=2`}, h[FieldRateLimit])
	assert.Equal(t, []string{"10"}, h[FieldXRateLimitLimit])
	assert.Equal(t, []string{"3"}, h[FieldXRateLimitRemaining])
	assert.Equal(t, []string{"2"}, h[FieldXRateLimitReset])
	assert.NotContains(t, h, FieldRetryAfter)
	items, err := sfv.ParseList(h[FieldRateLimit][0])
	require.NoError(t, err)
	assert.Equal(t, `odd"name\`, items[0].Value)

	h = map[string][]string{}
	(&Renderer{QuietAdmitted: true}).Admitted(h, nil, d)
	assert.Empty(t, h)
	(&Renderer{}).Admitted(h, nil, sluice.Decision{Allowed: true, Limit: -1})
	assert.Empty(t, h)
}

func TestAdmittedFieldsAllocateNothingPerResponse(t *testing.T) {
	d := sluice.Decision{Allowed: true, Policy: "ratelimit/token-bucket", Limit: 1000, Remaining: 999, Reset: time.Second}
	rt := newRoute("", testpolicy.MustGuard(t, testpolicy.Window(d.Policy, time.Second)))
	h := map[string][]string{FieldRateLimit: nil, FieldRateLimitPolicy: nil}
	for _, r := range []Renderer{{}, {Legacy: true}} {
		allocs := testing.AllocsPerRun(200, func() { r.Admitted(h, rt, d) })
		assert.Zero(t, allocs)
	}
	assert.Equal(t, []string{`"ratelimit/token-bucket";q=1000;w=1`}, h[FieldRateLimitPolicy])
	assert.Equal(t, []string{`"ratelimit/token-bucket";r=999;t=1`}, h[FieldRateLimit])

	// A policy outside the route's chain (a nested Guard's) is cached too.
	other := sluice.Decision{Allowed: true, Policy: "nested", Limit: 5, Remaining: 4}
	allocs := testing.AllocsPerRun(200, func() { (&Renderer{}).Admitted(h, rt, other) })
	assert.Zero(t, allocs)
	assert.Equal(t, []string{`"nested";q=5`}, h[FieldRateLimitPolicy])
	// A new quota makes new policy fields.
	other.Limit = 6
	(&Renderer{}).Admitted(h, rt, other)
	assert.Equal(t, []string{`"nested";q=6`}, h[FieldRateLimitPolicy])
}

// A route answers first with the fields of the policy its last admitted
// response quoted; a response decided by another policy, or by the same
// policy with a new limit, still carries its own, even with the same r and
// t.
func TestAdmittedFieldsFollowTheDecidingPolicy(t *testing.T) {
	rt := newRoute("", testpolicy.MustGuard(t, testpolicy.Window("a", time.Second), testpolicy.Window("b", 2*time.Second)))
	a := sluice.Decision{Allowed: true, Policy: "a", Limit: 10, Remaining: 9, Reset: time.Second}
	b := sluice.Decision{Allowed: true, Policy: "b", Limit: 10, Remaining: 9, Reset: time.Second}
	a5 := a // a after a live update of its limit
	a5.Limit = 5
	var r Renderer
	for _, step := range []struct {
		d             sluice.Decision
		policy, value string
	}{
		{a, `"a";q=10;w=1`, `"a";r=9;t=1`},
		{b, `"b";q=10;w=2`, `"b";r=9;t=1`},
		{a, `"a";q=10;w=1`, `"a";r=9;t=1`},
		{a5, `"a";q=5;w=1`, `"a";r=9;t=1`},
		{a, `"a";q=10;w=1`, `"a";r=9;t=1`},
	} {
		for i := range 2 * shareEvery {
			h := map[string][]string{}
			r.Admitted(h, rt, step.d)
			require.Equal(t, []string{step.policy}, h[FieldRateLimitPolicy], "response %d", i)
			require.Equal(t, []string{step.value}, h[FieldRateLimit], "response %d", i)
		}
	}
}

func TestRateLimitValueIsSharedWhileUnchanged(t *testing.T) {
	rt := newRoute("", testpolicy.MustGuard(t, testpolicy.Window("a", time.Second), testpolicy.Window("b", time.Second)))
	da := sluice.Decision{Allowed: true, Policy: "a", Limit: 10, Remaining: 9, Reset: time.Second}
	db := sluice.Decision{Allowed: true, Policy: "b", Limit: 20, Remaining: 19, Reset: 2 * time.Second}
	var r Renderer
	admit := func(d sluice.Decision) []string {
		h := map[string][]string{}
		r.Admitted(h, rt, d)
		return h[FieldRateLimit]
	}
	same := func(x, y []string) bool { return unsafe.SliceData(x) == unsafe.SliceData(y) }
	// settle returns the value that responses with d's r and t share once a
	// few of them have made their own.
	settle := func(d sluice.Decision, want string) []string {
		t.Helper()
		prev := admit(d)
		for range 4 * shareEvery {
			v := admit(d)
			require.Equal(t, []string{want}, v)
			if same(prev, v) {
				return v
			}
			prev = v
		}
		t.Fatalf("%s: no value shared", want)
		return nil
	}

	a1 := settle(da, `"a";r=9;t=1`)
	assert.True(t, same(a1, admit(da)), "an unchanged r and t reuse the value")
	assert.Equal(t, 1, cap(a1), "a shared value has no room to append into")

	// Each policy keeps its own value.
	b1 := settle(db, `"b";r=19;t=2`)
	assert.True(t, same(a1, admit(da)))
	assert.True(t, same(b1, admit(db)))

	// A new r, or a new t, is never answered with the kept value.
	da.Remaining = 8
	a3 := settle(da, `"a";r=8;t=1`)
	assert.False(t, same(a1, a3))
	da.Reset = 1500 * time.Millisecond
	settle(da, `"a";r=8;t=2`)
	da.Remaining, da.Reset = 9, time.Second
	a4 := settle(da, `"a";r=9;t=1`)

	// A rejection whose t matches shares the value and still gets its
	// Retry-After; the older fields are made next to a shared value.
	h := map[string][]string{}
	rej := sluice.Decision{Policy: "a", Limit: 10, Remaining: 9, RetryAfter: 900 * time.Millisecond, Cause: sluice.ErrRateLimited}
	assert.Equal(t, 429, r.Rejected(h, rt, rej, true))
	assert.True(t, same(a4, h[FieldRateLimit]))
	assert.Equal(t, []string{"1"}, h[FieldRetryAfter])
	h = map[string][]string{}
	(&Renderer{Legacy: true}).Admitted(h, rt, da)
	assert.True(t, same(a4, h[FieldRateLimit]))
	assert.Equal(t, []string{"9"}, h[FieldXRateLimitRemaining])
	assert.Equal(t, []string{"1"}, h[FieldXRateLimitReset])
	assert.Equal(t, []string{"10"}, h[FieldXRateLimitLimit])

	// Values that change with every response replace the kept one only now
	// and then.
	slot := &rt.policies[0].fields
	kept, replaced := slot.Load().last.Load(), 0
	for i := range 64 {
		da.Remaining = int64(i % 5)
		v := admit(da)
		require.Equal(t, []string{`"a";r=` + strconv.Itoa(i%5) + ";t=1"}, v)
		if c := slot.Load().last.Load(); c != kept {
			kept = c
			replaced++
		}
	}
	assert.Less(t, replaced, 48, "a value kept for every response made")

	// A value longer than a slab's bytes is made afresh each time.
	long := sluice.Decision{Allowed: true, Policy: strings.Repeat("p", 2000), Limit: 9, Remaining: 8}
	for range 2 * shareEvery {
		l1, l2 := admit(long), admit(long)
		require.Equal(t, l1, l2)
		require.False(t, same(l1, l2))
	}
}

func TestFieldsClampToStructuredIntegers(t *testing.T) {
	h := map[string][]string{}
	(&Renderer{}).Admitted(h, nil, sluice.Decision{Allowed: true, Policy: "p", Limit: 1 << 62, Remaining: 1 << 61})
	assert.Equal(t, []string{`"p";r=999999999999999;t=0`}, h[FieldRateLimit])
}

func TestProblemBody(t *testing.T) {
	causes := map[error]string{
		sluice.ErrRateLimited:        "rate-limited",
		sluice.ErrCircuitOpen:        "circuit-open",
		sluice.ErrOverloaded:         "overloaded",
		sluice.ErrConcurrencyLimited: "concurrency-limited",
	}
	for cause, typ := range causes {
		d := sluice.Decision{Policy: "secret-policy", Limit: -1, RetryAfter: 2500 * time.Millisecond, Cause: cause}
		body := (&Renderer{}).AppendProblem(nil, d)
		var p struct {
			Type       string `json:"type"`
			Title      string `json:"title"`
			Status     int    `json:"status"`
			Detail     string `json:"detail"`
			RetryAfter int64  `json:"retryAfter"`
		}
		require.NoError(t, json.Unmarshal(body, &p), string(body))
		assert.Equal(t, DefaultProblemTypeBase+typ, p.Type)
		assert.Equal(t, HTTPStatus(sluice.CauseOf(cause)), p.Status)
		assert.NotEmpty(t, p.Title)
		assert.NotEmpty(t, p.Detail)
		assert.EqualValues(t, 3, p.RetryAfter)
		assert.NotContains(t, string(body), "secret-policy")
		assert.NotContains(t, string(body), cause.Error())
	}
	body := (&Renderer{ProblemTypeBase: "https://example.com/p/"}).AppendMissingKeyProblem(nil)
	var p map[string]any
	require.NoError(t, json.Unmarshal(body, &p))
	assert.Equal(t, "https://example.com/p/missing-key", p["type"])
	assert.EqualValues(t, 400, p["status"])
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		-time.Second: 0, 0: 0, 1: 1, time.Second: 1, time.Second + 1: 2, 59500 * time.Millisecond: 60,
	} {
		assert.Equal(t, want, RetryAfterSeconds(d), d)
	}
}

func TestFieldValuesOutliveTheirSlab(t *testing.T) {
	rt := newRoute("", testpolicy.MustGuard(t, testpolicy.Window("ratelimit/api", time.Second)))
	long := sluice.Decision{Allowed: true, Policy: strings.Repeat("p", 300), Limit: 9, Remaining: 8}
	type kept struct {
		h    map[string][]string
		want string
	}
	var all []kept
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				h := map[string][]string{}
				d := sluice.Decision{Allowed: true, Policy: "ratelimit/api", Limit: 1 << 40, Remaining: int64(g*1000 + i), Reset: time.Duration(i) * time.Second}
				want := `"ratelimit/api";r=` + strconv.Itoa(g*1000+i) + ";t=" + strconv.Itoa(i)
				if i%50 == 0 {
					d = long
					want = `"` + long.Policy + `";r=8;t=0`
				}
				if i%5 == 1 && i%7 != 0 {
					// Values every goroutine repeats: shared between responses.
					d.Remaining, d.Reset = 7, 3*time.Second
					want = `"ratelimit/api";r=7;t=3`
				}
				r := Renderer{Legacy: i%3 == 0}
				if i%7 == 0 {
					d.Allowed, d.Cause, d.RetryAfter = false, sluice.ErrRateLimited, time.Duration(i+1)*time.Second
					want = strings.Replace(want, ";t="+strconv.Itoa(i), ";t="+strconv.Itoa(i+1), 1)
					if d.Policy == long.Policy {
						want = `"` + long.Policy + `";r=8;t=` + strconv.Itoa(i+1)
					}
					r.Rejected(h, rt, d, true)
				} else {
					r.Admitted(h, rt, d)
				}
				mu.Lock()
				all = append(all, kept{h, want})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, all, 2000)
	for _, k := range all {
		require.Equal(t, []string{k.want}, k.h[FieldRateLimit])
	}
}

// A route shares its problem answer between rejections that agree on the
// cause, the delay in whole seconds and the problem type base, and makes a
// new one when any of them changes.
func TestProblemIsSharedWhileRejectionsAgree(t *testing.T) {
	rt := &Route{}
	open := func(retry time.Duration) sluice.Decision {
		return sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: retry, Cause: sluice.ErrCircuitOpen}
	}
	var r Renderer
	want := func(d sluice.Decision, base *Renderer) string { return string(base.AppendProblem(nil, d)) }
	p := r.Problem(rt, open(29500*time.Millisecond))
	assert.Equal(t, want(open(30*time.Second), &r), string(p.Body))
	assert.Equal(t, []string{strconv.Itoa(len(p.Body))}, p.Length)
	assert.Same(t, p, r.Problem(rt, open(29100*time.Millisecond)), "the same second: shared")
	next := r.Problem(rt, open(28*time.Second))
	assert.NotSame(t, p, next)
	assert.Equal(t, want(open(28*time.Second), &r), string(next.Body))
	limited := sluice.Decision{Policy: "ratelimit/a", Limit: 5, RetryAfter: 28 * time.Second, Cause: sluice.ErrRateLimited}
	assert.Equal(t, want(limited, &r), string(r.Problem(rt, limited).Body), "another cause")
	other := Renderer{ProblemTypeBase: "https://example.com/problems/"}
	assert.Equal(t, want(limited, &other), string(other.Problem(rt, limited).Body), "another base")
	assert.Equal(t, want(limited, &r), string(r.Problem(nil, limited).Body), "no route: made afresh")
}

// admitFields admits one request with g and returns the fields rt's
// Renderer sets on its answer.
func admitFields(t *testing.T, g *sluice.Guard, rt *Route) map[string][]string {
	t.Helper()
	var c sluice.Call
	require.NoError(t, g.Begin(context.Background(), &c))
	h := map[string][]string{}
	var r Renderer
	r.Admitted(h, rt, c.Decision())
	require.NoError(t, c.End(nil))
	return h
}

// policyParams returns the q and w of the one RateLimit-Policy item in h.
func policyParams(t *testing.T, h map[string][]string) (q, w int64) {
	t.Helper()
	v := h[FieldRateLimitPolicy]
	require.Len(t, v, 1)
	items, err := sfv.ParseList(v[0])
	require.NoError(t, err)
	require.Len(t, items, 1)
	q, _ = items[0].Int("q")
	w, _ = items[0].Int("w")
	return q, w
}

// A limiter's SetLimit changes its window live: the RateLimit-Policy field
// tells the new one, on admitted answers (the route's quoted fields) and
// on rejections, even when the limit stays the same.
func TestRateLimitPolicyFollowsSetLimit(t *testing.T) {
	fw, err := ratelimit.NewFixedWindow(5, time.Minute)
	require.NoError(t, err)
	clk := sluice.NewManualClock(time.Hour)
	g, err := sluice.New(sluice.With(fw), sluice.WithClock(clk))
	require.NoError(t, err)
	rs, err := NewRoutes(RouteTo("GET /x", g))
	require.NoError(t, err)
	rt := rs.Match("GET /x")
	for range 2 { // the second is the quoted path
		q, w := policyParams(t, admitFields(t, g, rt))
		assert.Equal(t, [2]int64{5, 60}, [2]int64{q, w})
	}
	require.NoError(t, fw.SetLimit(5, 10*time.Second))
	clk.Advance(2 * time.Minute) // a fresh window of the new size
	for range 2 {
		q, w := policyParams(t, admitFields(t, g, rt))
		assert.Equal(t, [2]int64{5, 10}, [2]int64{q, w}, "the same limit over a new window")
	}
	require.NoError(t, fw.SetLimit(10, 30*time.Second))
	clk.Advance(2 * time.Minute)
	q, w := policyParams(t, admitFields(t, g, rt))
	assert.Equal(t, [2]int64{10, 30}, [2]int64{q, w})
	assert.Equal(t, 30*time.Second, rt.Window(fw.Name()), "the gRPC adapter's window too")
}

// w is whole seconds: a window of another length is told as the seconds
// that hold it, with the quota scaled to keep the rate, so that a client
// pacing itself by q/w keeps to the rate it is given. A rate's interval
// rounded up to the nanosecond does not turn 1 s into 2.
func TestRateLimitPolicyOverWholeSeconds(t *testing.T) {
	for _, tc := range []struct {
		limit  int64
		window time.Duration
		want   string
	}{
		{100, time.Minute, `"p";q=100;w=60`},
		{10, 100 * time.Millisecond, `"p";q=100;w=1`},
		{3, 1500 * time.Millisecond, `"p";q=4;w=2`},
		{3, time.Second + 2, `"p";q=3;w=1`},
		{70, 10*time.Second + 10, `"p";q=70;w=10`},
		{3, 999_999_999, `"p";q=3;w=1`},
		{1, time.Nanosecond, `"p";q=1000000000;w=1`},
		{1 << 60, time.Nanosecond, `"p";q=999999999999999;w=1`},
		{5, 0, `"p";q=5`},
	} {
		assert.Equal(t, tc.want, string(AppendRateLimitPolicy(nil, "p", tc.limit, tc.window)), "%d over %v", tc.limit, tc.window)
	}
	for _, tc := range []struct {
		rate  ratelimit.Rate
		burst int64
		want  string
	}{
		{ratelimit.PerSecond(100), 10, `;q=100;w=1`},
		{ratelimit.PerSecond(3), 3, `;q=3;w=1`},
		{ratelimit.PerSecond(7), 70, `;q=70;w=10`},
	} {
		tb, err := ratelimit.NewTokenBucket(tc.rate, tc.burst)
		require.NoError(t, err)
		g, err := sluice.New(sluice.With(tb))
		require.NoError(t, err)
		rs, err := NewRoutes(DefaultRoute(g))
		require.NoError(t, err)
		h := admitFields(t, g, rs.Default())
		assert.Equal(t, `"ratelimit/token-bucket"`+tc.want, h[FieldRateLimitPolicy][0], "%v, burst %d", tc.rate, tc.burst)
	}
}

// The window epoch moves at every SetLimit anywhere, a Keyed limiter's new
// keys' among them (each takes the numbers set since): a route whose
// windows did not change reads them again without an allocation.
func TestAnEpochThatChangesNoWindowCostsNoAllocation(t *testing.T) {
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1e6), 1e6)
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(tb))
	require.NoError(t, err)
	rs, err := NewRoutes(DefaultRoute(g))
	require.NoError(t, err)
	rt := rs.Default()
	var c sluice.Call
	require.NoError(t, g.Begin(context.Background(), &c))
	d := c.Decision()
	require.NoError(t, c.End(nil))
	h := map[string][]string{}
	var r Renderer
	r.Admitted(h, rt, d)
	allocs := testing.AllocsPerRun(100, func() {
		policywindow.Changed()
		clear(h)
		r.Admitted(h, rt, d)
	})
	assert.Zero(t, allocs)
	q, w := policyParams(t, h)
	assert.Equal(t, [2]int64{1e6, 1}, [2]int64{q, w})
}
