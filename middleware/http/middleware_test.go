package sluicehttp

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/routing"
	"github.com/sluice-go/sluice/middleware/internal/sfv"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
	"github.com/sluice-go/sluice/ratelimit"
)

func TestRejectionFieldsPerCause(t *testing.T) {
	tests := []struct {
		name   string
		d      sluice.Decision
		status int
		retry  int64
		quota  bool
	}{
		{"rate limited", sluice.Decision{Policy: "ratelimit/test", Limit: 100, Remaining: 0, Reset: 50 * time.Second, RetryAfter: 6100 * time.Millisecond, Cause: sluice.ErrRateLimited}, 429, 7, true},
		{"circuit open", sluice.Decision{Policy: "breaker/x", Limit: -1, RetryAfter: 12 * time.Second, Cause: sluice.ErrCircuitOpen}, 503, 12, false},
		{"overloaded", sluice.Decision{Policy: "adaptive/x", Limit: -1, RetryAfter: 300 * time.Millisecond, Cause: sluice.ErrOverloaded}, 503, 1, false},
		{"concurrency limited", sluice.Decision{Policy: "adaptive/c", Limit: -1, RetryAfter: 2 * time.Second, Cause: sluice.ErrConcurrencyLimited}, 503, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluice.NewManualClock(0)
			g := newGuard(t, clock, testpolicy.Windowed{Policy: testpolicy.Rejecter{D: tt.d}, W: time.Minute})
			ran := false
			h := mw(t, WithGuard(g))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
			rec := serve(h, http.MethodGet, "/x")
			assert.False(t, ran)
			assert.Equal(t, tt.status, rec.Code)
			assert.Equal(t, routing.ProblemContentType, rec.Header().Get("Content-Type"))
			ra, err := strconv.ParseInt(rec.Header().Get("Retry-After"), 10, 64)
			require.NoError(t, err)
			assert.Equal(t, tt.retry, ra)

			var p map[string]any
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
			assert.Equal(t, routing.DefaultProblemTypeBase+sluice.CauseOf(tt.d.Cause).String(), p["type"])
			assert.EqualValues(t, tt.status, p["status"])
			assert.NotContains(t, rec.Body.String(), tt.d.Cause.Error())
			assert.Equal(t, strconv.Itoa(rec.Body.Len()), rec.Header().Get("Content-Length"))

			if !tt.quota {
				assert.Empty(t, rec.Header().Get("RateLimit"))
				return
			}
			pol, err := sfv.ParseList(rec.Header().Get("RateLimit-Policy"))
			require.NoError(t, err)
			require.Len(t, pol, 1)
			assert.Equal(t, "ratelimit/test", pol[0].Value)
			q, _ := pol[0].Int("q")
			w, _ := pol[0].Int("w")
			assert.EqualValues(t, 100, q)
			assert.EqualValues(t, 60, w)
			rl, err := sfv.ParseList(rec.Header().Get("RateLimit"))
			require.NoError(t, err)
			require.Len(t, rl, 1)
			r, _ := rl[0].Int("r")
			tp, ok := rl[0].Int("t")
			require.True(t, ok)
			assert.EqualValues(t, 0, r)
			assert.GreaterOrEqual(t, ra, tp)
		})
	}
}

func TestAdmittedFieldsFromRealLimiter(t *testing.T) {
	clock := sluice.NewManualClock(0)
	g := newGuard(t, clock, newWindow(t, 3, 10*time.Second))
	h := mw(t, WithGuard(g), WithRenderer(middleware.Renderer{Legacy: true}))(statusHandler(200))
	for want := int64(2); want >= 0; want-- {
		rec := serve(h, http.MethodGet, "/")
		require.Equal(t, 200, rec.Code)
		rl, err := sfv.ParseList(rec.Header().Get("RateLimit"))
		require.NoError(t, err)
		r, _ := rl[0].Int("r")
		assert.Equal(t, want, r)
		assert.Equal(t, strconv.FormatInt(want, 10), rec.Header().Get("X-RateLimit-Remaining"))
		assert.Equal(t, "3", rec.Header().Get("X-RateLimit-Limit"))
		assert.Equal(t, `"ratelimit/test";q=3;w=10`, rec.Header().Get("RateLimit-Policy"))
	}
	rec := serve(h, http.MethodGet, "/")
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	ra, _ := strconv.ParseInt(rec.Header().Get("Retry-After"), 10, 64)
	rl, err := sfv.ParseList(rec.Header().Get("RateLimit"))
	require.NoError(t, err)
	tp, _ := rl[0].Int("t")
	assert.EqualValues(t, 10, ra)
	assert.GreaterOrEqual(t, ra, tp)
}

func TestServerErrorsTripTheBreakerClientErrorsDoNot(t *testing.T) {
	clock := sluice.NewManualClock(0)
	b := newBreaker(t, 3, time.Minute)
	g := newGuard(t, clock, b)
	status := http.StatusNotFound
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	for range 10 {
		assert.Equal(t, http.StatusNotFound, serve(h, http.MethodGet, "/").Code)
	}
	status = http.StatusBadGateway
	for range 3 {
		assert.Equal(t, http.StatusBadGateway, serve(h, http.MethodGet, "/").Code)
	}
	rec := serve(h, http.MethodGet, "/")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "60", rec.Header().Get("Retry-After"))
}

func TestClassifierOverride(t *testing.T) {
	c := testpolicy.NewCounter()
	g := newGuard(t, sluice.NewManualClock(0), c)
	h := mw(t, WithGuard(g), WithClassifier(func(status int) sluice.Outcome {
		if status == http.StatusTooManyRequests {
			return sluice.Failure
		}
		return middleware.ClassifyHTTPStatus(status)
	}))(statusHandler(http.StatusTooManyRequests))
	serve(h, http.MethodGet, "/")
	assert.Equal(t, 1, c.Outcomes()[sluice.Failure])
}

func TestInnerRejectionDoesNotCountForOuterGuard(t *testing.T) {
	outer := testpolicy.NewCounter()
	og := newGuard(t, sluice.NewManualClock(0), outer)
	ig := newGuard(t, sluice.NewManualClock(0), testpolicy.Rejecter{D: sluice.Decision{Policy: "breaker/inner", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen}})
	// Something between the two that wraps the writer, as logging middleware does.
	between := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(struct{ unwrapper }{unwrapper{w}}, r)
		})
	}
	h := mw(t, WithGuard(og))(between(mw(t, WithGuard(ig))(statusHandler(200))))
	rec := serve(h, http.MethodGet, "/")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, outer.Outcomes())
}

type unwrapper struct{ http.ResponseWriter }

func (u unwrapper) Unwrap() http.ResponseWriter { return u.ResponseWriter }

func TestPanicCountsAsFailureAndGoesOn(t *testing.T) {
	c := testpolicy.NewCounter()
	g := newGuard(t, sluice.NewManualClock(0), c)
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	assert.PanicsWithValue(t, "boom", func() { serve(h, http.MethodGet, "/") })
	h = mw(t, WithGuard(g))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	assert.Panics(t, func() { serve(h, http.MethodGet, "/") })
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1, sluice.Ignored: 1}, c.Outcomes())
}

func TestSkipperAndUnguardedRoutes(t *testing.T) {
	g := newGuard(t, sluice.NewManualClock(0), testpolicy.Rejecter{D: sluice.Decision{Policy: "p", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrOverloaded}})
	rs, err := middleware.NewRoutes(middleware.RouteTo("GET /guarded", g))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("GET /guarded", statusHandler(200))
	mux.Handle("GET /open", statusHandler(200))
	mux.Handle("GET /healthz", statusHandler(200))
	h := mw(t, WithRoutes(rs), WithSkipper(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))(mux)
	assert.Equal(t, 503, serve(h, http.MethodGet, "/guarded").Code)
	assert.Equal(t, 200, serve(h, http.MethodGet, "/open").Code)
	assert.Equal(t, 200, serve(h, http.MethodGet, "/healthz").Code)

	skipAll := mw(t, WithGuard(g), WithSkipper(func(*http.Request) bool { return true }))(statusHandler(200))
	assert.Equal(t, 200, serve(skipAll, http.MethodGet, "/guarded").Code)
}

func TestRoutesByPatternInsideMuxAndByRouteFunc(t *testing.T) {
	g := newGuard(t, sluice.NewManualClock(0), testpolicy.Rejecter{D: sluice.Decision{Policy: "p", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrOverloaded}})
	rs, err := middleware.NewRoutes(middleware.RouteTo("GET /items/{id}", g))
	require.NoError(t, err)
	m := mw(t, WithRoutes(rs))
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", m(statusHandler(200)))
	mux.Handle("GET /other", m(statusHandler(200)))
	assert.Equal(t, 503, serve(mux, http.MethodGet, "/items/7").Code)
	assert.Equal(t, 200, serve(mux, http.MethodGet, "/other").Code)

	byFunc := mw(t, WithRoutes(rs), WithRouteFunc(func(r *http.Request) string {
		if len(r.URL.Path) > 7 && r.URL.Path[:7] == "/items/" {
			return "GET /items/{id}"
		}
		return ""
	}))(statusHandler(200))
	assert.Equal(t, 503, serve(byFunc, http.MethodGet, "/items/9").Code)
	assert.Equal(t, 200, serve(byFunc, http.MethodGet, "/x").Code)
}

// Another router's routes carry no method (chi's "/cart"): with
// WithRouteFunc, a "POST /cart" entry is picked over the "/cart" one, as
// the Echo adapter picks it, and names the request's route for its key.
func TestRouteFuncPicksTheEntryOfTheRequestsMethod(t *testing.T) {
	strict := testpolicy.MustGuard(t, testpolicy.Reject(sluice.ErrRateLimited, time.Second))
	lax := testpolicy.MustGuard(t, testpolicy.Admitter{N: "lax"})
	rs, err := middleware.NewRoutes(middleware.RouteTo("POST /cart", strict), middleware.RouteTo("/cart", lax))
	require.NoError(t, err)
	var routes []string
	keyer, err := middleware.NewKeyer(middleware.RejectMissingKey(), func(r middleware.Request) (string, bool) {
		routes = append(routes, r.Route())
		return "k", true
	})
	require.NoError(t, err)
	h := mw(t, WithRoutes(rs), WithKeyer(keyer), WithRouteFunc(func(*http.Request) string { return "/cart" }))(statusHandler(http.StatusOK))
	assert.Equal(t, http.StatusOK, serve(h, http.MethodGet, "/cart").Code, "the /cart entry")
	assert.Equal(t, http.StatusTooManyRequests, serve(h, http.MethodPost, "/cart").Code, "the POST /cart entry")
	assert.Equal(t, []string{"/cart", "POST /cart"}, routes)
}

// A mux mounted under a prefix of an outer mux (an http.StripPrefix
// sub-router) gets requests whose Pattern the outer mux has set ("/api/"):
// the middleware wrapping the inner mux routes by the pattern the inner mux
// picks, not by that one.
func TestWrappedMuxUnderOuterMuxRoutesByItsOwnPattern(t *testing.T) {
	g := newGuard(t, sluice.NewManualClock(0), newWindow(t, 1, time.Minute))
	rs, err := middleware.NewRoutes(middleware.RouteTo("GET /items/{id}", g))
	require.NoError(t, err)
	var resource string
	inner := http.NewServeMux()
	inner.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		resource, _ = sluice.ResourceFrom(r.Context())
		w.WriteHeader(http.StatusOK)
	})
	inner.Handle("GET /other", statusHandler(http.StatusOK))
	outer := http.NewServeMux()
	outer.Handle("/api/", http.StripPrefix("/api", mw(t, WithRoutes(rs), WithRouteResource())(inner)))

	assert.Equal(t, http.StatusOK, serve(outer, http.MethodGet, "/api/items/1").Code)
	assert.Equal(t, "GET /items/{id}", resource, "the inner mux's pattern is the route")
	assert.Equal(t, http.StatusTooManyRequests, serve(outer, http.MethodGet, "/api/items/2").Code,
		"GET /items/{id} is limited to 1 a minute")
	assert.Equal(t, http.StatusOK, serve(outer, http.MethodGet, "/api/other").Code, "another route is not limited")
}

func TestMissingKeyIsRejected(t *testing.T) {
	c := testpolicy.NewCounter()
	g := newGuard(t, sluice.NewManualClock(0), c)
	k, err := middleware.NewKeyer(middleware.RejectMissingKey(), middleware.KeyByHeader("X-Api-Key"))
	require.NoError(t, err)
	var gotKey string
	h := mw(t, WithGuard(g), WithKeyer(k))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotKey, _ = sluice.KeyFrom(r.Context())
	}))
	rec := serve(h, http.MethodGet, "/")
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Equal(t, routing.ProblemContentType, rec.Header().Get("Content-Type"))
	assert.Empty(t, c.Outcomes())

	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-Api-Key", "tenant-1")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	assert.Equal(t, 200, rec.Code)
	assert.Equal(t, "tenant-1", gotKey)
}

func TestDenyHandler(t *testing.T) {
	d := sluice.Decision{Policy: "p", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrOverloaded}
	g := newGuard(t, sluice.NewManualClock(0), testpolicy.Rejecter{D: d})
	var seen sluice.Decision
	h := mw(t, WithGuard(g), WithDenyHandler(func(w http.ResponseWriter, r *http.Request, got sluice.Decision) {
		seen = got
		w.WriteHeader(http.StatusTeapot)
	}))(statusHandler(200))
	assert.Equal(t, http.StatusTeapot, serve(h, http.MethodGet, "/").Code)
	assert.True(t, errors.Is(seen.Cause, sluice.ErrOverloaded))
}

func TestHeadRejectionHasNoBody(t *testing.T) {
	g := newGuard(t, sluice.NewManualClock(0), testpolicy.Rejecter{D: sluice.Decision{Policy: "p", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrOverloaded}})
	rec := serve(mw(t, WithGuard(g))(statusHandler(200)), http.MethodHead, "/")
	assert.Equal(t, 503, rec.Code)
	assert.Zero(t, rec.Body.Len())
}

func TestKeyByCookieThroughMiddleware(t *testing.T) {
	g := newGuard(t, sluice.NewManualClock(0), testpolicy.NewCounter())
	k, err := middleware.NewKeyer(middleware.SharedKey("anonymous"), middleware.KeyByCookie("session"))
	require.NoError(t, err)
	var key string
	h := mw(t, WithGuard(g), WithKeyer(k))(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		key, _ = sluice.KeyFrom(r.Context())
	}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.AddCookie(&http.Cookie{Name: "session", Value: "abc"})
	h.ServeHTTP(httptest.NewRecorder(), req)
	assert.Equal(t, "abc", key)
	serve(h, http.MethodGet, "/")
	assert.Equal(t, "anonymous", key)
}

func TestConcurrentRequestsNeverExceedTheLimit(t *testing.T) {
	clock := sluice.NewManualClock(0)
	g := newGuard(t, clock, newWindow(t, 50, time.Minute), newBreaker(t, 1000, time.Minute))
	var ok, limited atomic.Int64
	h := mw(t, WithGuard(g))(statusHandler(200))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				rec := serve(h, http.MethodGet, "/")
				switch rec.Code {
				case 200:
					ok.Add(1)
					assert.NotEmpty(t, rec.Header().Get("RateLimit"))
				case 429:
					limited.Add(1)
				default:
					t.Errorf("status %d", rec.Code)
				}
			}
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 50, ok.Load())
	assert.EqualValues(t, 150, limited.Load())
}

func TestRouteResourceGivesEachRouteItsBreaker(t *testing.T) {
	group, err := breaker.NewGroup("routes", breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(time.Minute))
	require.NoError(t, err)
	g := newGuard(t, sluice.NewManualClock(0), group)
	var resource string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /flaky", func(w http.ResponseWriter, r *http.Request) {
		resource, _ = sluice.ResourceFrom(r.Context())
		w.WriteHeader(http.StatusBadGateway)
	})
	mux.Handle("GET /fine", statusHandler(200))
	h := mw(t, WithGuard(g), WithRouteResource())(mux)
	for range 2 {
		assert.Equal(t, http.StatusBadGateway, serve(h, http.MethodGet, "/flaky").Code)
	}
	assert.Equal(t, "GET /flaky", resource)
	assert.Equal(t, http.StatusServiceUnavailable, serve(h, http.MethodGet, "/flaky").Code)
	assert.Equal(t, http.StatusOK, serve(h, http.MethodGet, "/fine").Code, "another route has its own breaker")

	// Without the resource, both routes share one breaker.
	shared, err := breaker.NewGroup("shared", breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(time.Minute))
	require.NoError(t, err)
	h = mw(t, WithGuard(newGuard(t, sluice.NewManualClock(0), shared)))(mux)
	for range 2 {
		serve(h, http.MethodGet, "/flaky")
	}
	assert.Equal(t, http.StatusServiceUnavailable, serve(h, http.MethodGet, "/fine").Code)
}

// A concurrency limit is no quota over time: beside a token bucket, the
// RateLimit fields are the bucket's, and a concurrency rejection carries
// none.
func TestConcurrencyLimitIsNoRateLimitQuota(t *testing.T) {
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(100), 100, ratelimit.WithName("per-route"))
	require.NoError(t, err)
	bh, err := adaptive.NewBulkhead(1)
	require.NoError(t, err)
	g := newGuard(t, sluice.NewManualClock(0), tb, bh)
	release := make(chan struct{})
	entered := make(chan struct{})
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(entered)
			<-release
		}
	}))
	rec := serve(h, http.MethodGet, "/")
	assert.Equal(t, `"per-route";q=100;w=1`, rec.Header().Get(routing.FieldRateLimitPolicy))
	assert.Equal(t, `"per-route";r=99;t=1`, rec.Header().Get(routing.FieldRateLimit))
	done := make(chan struct{})
	go func() { serve(h, http.MethodGet, "/hold"); close(done) }()
	<-entered
	rec = serve(h, http.MethodGet, "/")
	close(release)
	<-done
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Empty(t, rec.Header().Get(routing.FieldRateLimit), "a concurrency rejection is no rate quota")
	assert.NotEmpty(t, rec.Header().Get("Retry-After"))
}

// A classifier (WithClassifier) that panics must not leave the Guard's
// admission open: the call is ended (as the Transport ends it when the
// Guard's classifier panics) and a bulkhead's slot is given back.
func TestAClassifierThatPanicsEndsTheCall(t *testing.T) {
	bh, err := adaptive.NewBulkhead(1)
	require.NoError(t, err)
	c := testpolicy.NewCounter()
	g := newGuard(t, sluice.SystemClock, c, bh)
	h := mw(t, WithGuard(g), WithClassifier(func(status int) sluice.Outcome {
		if status == http.StatusTeapot {
			panic("classifier bug")
		}
		return sluice.Success
	}))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/teapot" {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	func() {
		defer func() { _ = recover() }()
		serve(h, http.MethodGet, "/teapot")
	}()
	assert.Equal(t, 1, c.Outcomes()[sluice.Failure]+c.Outcomes()[sluice.Success]+c.Outcomes()[sluice.Ignored],
		"the call whose classifier panicked is never ended: %v", c.Outcomes())
	rec := serve(h, http.MethodGet, "/")
	assert.Equal(t, http.StatusOK, rec.Code, "the bulkhead's only slot leaked: every later request is rejected")
}

// A handler that writes nothing by the Guard's deadline is counted a
// timeout (a Failure); the client must not be told 200 OK with an empty
// body for it.
func TestNothingWrittenByTheDeadlineIsA504(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testpolicy.NewCounter()
		g, err := sluice.New(sluice.With(c), sluice.WithClock(monoclock.New()), sluice.WithTimeout(100*time.Millisecond))
		require.NoError(t, err)
		defer g.Close()
		h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // the dependency did not answer in time; nothing written
		}))
		rec := serve(h, http.MethodGet, "/")
		require.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, c.Outcomes(), "counted a timeout")
		assert.Equal(t, http.StatusGatewayTimeout, rec.Code, "a timed-out call answered %d with body %q", rec.Code, rec.Body.String())
	})
}

// A ServeMux route registered without a method ("/cart") carries none, as
// Echo's and chi's routes do: a "POST /cart" table entry guards a POST to
// it, as it does behind WithRouteFunc and in Echo.
func TestAMethodEntryGuardsAMuxPatternWithoutAMethod(t *testing.T) {
	reject := newGuard(t, sluice.SystemClock, testpolicy.Reject(sluice.ErrRateLimited, time.Second))
	rs, err := middleware.NewRoutes(middleware.RouteTo("POST /cart", reject))
	require.NoError(t, err)

	mux := http.NewServeMux()
	mux.Handle("/cart", statusHandler(http.StatusOK))

	// The same table, the same request, through a route function that
	// names the route as the mux does: guarded.
	viaFunc := mw(t, WithRoutes(rs), WithRouteFunc(func(*http.Request) string { return "/cart" }))(mux)
	require.Equal(t, http.StatusTooManyRequests, serve(viaFunc, http.MethodPost, "/cart").Code)

	// Through the ServeMux's own pattern.
	viaMux := mw(t, WithRoutes(rs))(mux)
	assert.Equal(t, http.StatusTooManyRequests, serve(viaMux, http.MethodPost, "/cart").Code,
		`"POST /cart" guards a POST to the mux's "/cart" route`)
	assert.Equal(t, http.StatusOK, serve(viaMux, http.MethodGet, "/cart").Code)
}
