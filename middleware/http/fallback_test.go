package sluicehttp

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/routing"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
	"github.com/sluice-go/sluice/ratelimit"
)

// switchable rejects with d while on, and admits otherwise. It is named
// d's policy ("switch" when d names none).
type switchable struct {
	on bool
	d  sluice.Decision
}

func (s *switchable) Name() string {
	if s.d.Policy != "" {
		return s.d.Policy
	}
	return "switch"
}
func (s *switchable) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if s.on {
		return 0, sluice.Quota{Limit: s.d.Limit, Remaining: s.d.Remaining, Reset: s.d.Reset, RetryAfter: s.d.RetryAfter}, s.d.Cause
	}
	return 0, sluice.Quota{Limit: -1}, nil
}
func (*switchable) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (*switchable) Needs() sluice.Needs                                              { return 0 }

// text is a fallback answering status and body.
func text(status int, body string) degrade.Func[http.Handler] {
	return degrade.Value[http.Handler](http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
}

func fallbacks(t *testing.T, rules ...degrade.Rule[http.Handler]) *degrade.Fallbacks[http.Handler] {
	t.Helper()
	f, err := degrade.New(rules...)
	require.NoError(t, err)
	return f
}

func guardWith(t *testing.T, clock sluice.Clock, p sluice.Policy, fbs ...sluice.Fallback) *sluice.Guard {
	t.Helper()
	g, err := sluice.New(sluice.With(p), sluice.WithClock(clock), sluice.WithFallback(fbs...))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func newStale(t *testing.T, maxEntries int, opts ...middleware.StaleCacheOption) *middleware.StaleCache {
	t.Helper()
	c, err := middleware.NewStaleCache(maxEntries, time.Minute, 1024, opts...)
	require.NoError(t, err)
	return c
}

func openSwitch() *switchable {
	return &switchable{d: sluice.Decision{Policy: "b", Limit: -1, RetryAfter: 5 * time.Second, Cause: sluice.ErrCircuitOpen}}
}

// The stale cache, one of the Guard's fallbacks, is fed with the good GET
// responses of the Guard's routes and answers their rejections with a copy
// and its Age.
func TestStaleCacheServesLastGoodResponseWithAge(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	sw := openSwitch()
	cache := newStale(t, 2)
	g := guardWith(t, clock, sw, cache)
	n := 0
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		n++
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, r.PathValue("id")+"#"+strconv.Itoa(n))
	})
	mux.HandleFunc("GET /private", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, "secret")
	})
	mux.HandleFunc("GET /big", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(make([]byte, 2048))
	})
	mux.HandleFunc("GET /fails", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	})
	mux.HandleFunc("POST /items/{id}", func(w http.ResponseWriter, _ *http.Request) {})
	h := mw(t, WithGuard(g))(mux)

	assert.Equal(t, "1#1", serve(h, http.MethodGet, "/items/1").Body.String())
	assert.Equal(t, "2#2", serve(h, http.MethodGet, "/items/2").Body.String())
	assert.Equal(t, "1#3", serve(h, http.MethodGet, "/items/1").Body.String())
	serve(h, http.MethodGet, "/private")
	serve(h, http.MethodGet, "/big")
	serve(h, http.MethodGet, "/fails")
	assert.Equal(t, 2, cache.Len())

	sw.on = true
	clock.Advance(42 * time.Second)
	rec := serve(h, http.MethodGet, "/items/1")
	assert.Equal(t, 200, rec.Code)
	assert.Equal(t, "1#3", rec.Body.String())
	assert.Equal(t, "42", rec.Header().Get("Age"))
	assert.Equal(t, "text/plain", rec.Header().Get("Content-Type"))
	head := serve(h, http.MethodHead, "/items/2")
	assert.Equal(t, 200, head.Code)
	assert.Empty(t, head.Body.String(), "HEAD: the fields alone")
	for _, path := range []string{"/items/3", "/private", "/big", "/fails"} {
		assert.Equal(t, http.StatusServiceUnavailable, serve(h, http.MethodGet, path).Code, path)
	}
	assert.Equal(t, http.StatusServiceUnavailable, serve(h, http.MethodPost, "/items/1").Code, "a POST is never answered from a copy")
	clock.Advance(time.Minute)
	assert.Equal(t, http.StatusServiceUnavailable, serve(h, http.MethodGet, "/items/1").Code, "too old")
	assert.Equal(t, 3, n)
}

// The Guard's fallbacks answer in order: a stale copy first, a static
// answer when there is none; each cause its own.
func TestGuardFallbacksAnswerByCause(t *testing.T) {
	clock := sluice.NewManualClock(0)
	sw := openSwitch()
	cache := newStale(t, 8)
	var seen sluice.Decision
	g := guardWith(t, clock, sw, cache, fallbacks(t,
		degrade.OnCircuitOpen[http.Handler](func(_ context.Context, err error) (http.Handler, error) {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen, _ = sluice.RejectionOf(err)
				w.WriteHeader(http.StatusAccepted)
				_, _ = io.WriteString(w, "degraded")
			}), nil
		}),
		degrade.OnRateLimited(text(http.StatusOK, "slow down"))))
	h := mw(t, WithGuard(g))(statusHandler(http.StatusOK))

	serve(h, http.MethodGet, "/kept")
	sw.on = true
	assert.Equal(t, "body", serve(h, http.MethodGet, "/kept").Body.String(), "the stale copy first")
	rec := serve(h, http.MethodGet, "/other")
	assert.Equal(t, http.StatusAccepted, rec.Code)
	assert.Equal(t, "degraded", rec.Body.String())
	assert.Equal(t, "b", seen.Policy)
	assert.ErrorIs(t, seen.Cause, sluice.ErrCircuitOpen)

	sw.d = sluice.Decision{Policy: "rl", Limit: 10, RetryAfter: time.Second, Cause: sluice.ErrRateLimited}
	assert.Equal(t, "slow down", serve(h, http.MethodGet, "/x").Body.String())
	sw.d = sluice.Decision{Policy: "shed", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrOverloaded}
	assert.Equal(t, http.StatusServiceUnavailable, serve(h, http.MethodGet, "/x").Code, "no fallback for the cause: the problem response")
}

// Per-route fallbacks follow from the route table (a Guard per route), or
// from degrade.NewRoutes where one Guard serves several routes.
func TestFallbacksPerRoute(t *testing.T) {
	clock := sluice.NewManualClock(0)
	byRoute, err := degrade.NewRoutes(map[string]*degrade.Fallbacks[http.Handler]{
		"GET /a": fallbacks(t, degrade.OnRejected(text(http.StatusOK, "a's answer"))),
	}, fallbacks(t, degrade.OnRejected(text(http.StatusOK, "default answer"))))
	require.NoError(t, err)
	shared := &switchable{on: true, d: openSwitch().d}
	gShared := guardWith(t, clock, shared, byRoute)
	gc := guardWith(t, clock, &switchable{on: true, d: openSwitch().d}, fallbacks(t, degrade.OnCircuitOpen(text(http.StatusOK, "c's answer"))))
	rs, err := middleware.NewRoutes(middleware.RouteTo("GET /a", gShared), middleware.RouteTo("GET /b", gShared), middleware.RouteTo("GET /c", gc))
	require.NoError(t, err)
	mux := http.NewServeMux()
	for _, p := range []string{"GET /a", "GET /b", "GET /c"} {
		mux.Handle(p, statusHandler(http.StatusOK))
	}
	h := mw(t, WithRoutes(rs))(mux)
	assert.Equal(t, "a's answer", serve(h, http.MethodGet, "/a").Body.String())
	assert.Equal(t, "default answer", serve(h, http.MethodGet, "/b").Body.String())
	assert.Equal(t, "c's answer", serve(h, http.MethodGet, "/c").Body.String())
}

// A Guard's fallbacks that the middleware cannot serve (they answer no
// http.Handler) make it fail when it is built, saying what to declare.
func TestMiddlewareRefusesFallbacksItCannotServe(t *testing.T) {
	strs, err := degrade.New(degrade.OnRejected(degrade.Value("busy")))
	require.NoError(t, err)
	g := guardWith(t, sluice.NewManualClock(0), openSwitch(), strs)
	_, err = Middleware(WithGuard(g))
	require.Error(t, err)
	assert.ErrorContains(t, err, "degrade.New[http.Handler]")
	assert.ErrorContains(t, err, `"b"`, "names the Guard by its policies")
	rs, err := middleware.NewRoutes(middleware.RouteTo("GET /x", g))
	require.NoError(t, err)
	_, err = Middleware(WithRoutes(rs))
	assert.ErrorContains(t, err, "answers no http.Handler")
}

func TestMiddlewareMisconfigurationIsAnError(t *testing.T) {
	g := newGuard(t, sluice.NewManualClock(0))
	rs, err := middleware.NewRoutes(middleware.DefaultRoute(g))
	require.NoError(t, err)
	keyer, err := middleware.NewKeyer(middleware.RejectMissingKey(), middleware.KeyByHeader("X-Key"))
	require.NoError(t, err)
	skipNone := func(*http.Request) bool { return false }
	routeNone := func(*http.Request) string { return "" }
	denyNone := func(http.ResponseWriter, *http.Request, sluice.Decision) {}
	retrying, err := sluice.New(sluice.WithRetry(sluice.Retry{}))
	require.NoError(t, err)
	for name, opts := range map[string][]Option{
		"nil Guard":             {WithGuard(nil)},
		"nil routes":            {WithRoutes(nil)},
		"Guard and routes":      {WithGuard(g), WithRoutes(rs)},
		"routes and Guard":      {WithRoutes(rs), WithGuard(g)},
		"Guard twice":           {WithGuard(g), WithGuard(g)},
		"nil option":            {nil},
		"nil keyer":             {WithKeyer(nil)},
		"nil skipper":           {WithSkipper(nil)},
		"nil route func":        {WithRouteFunc(nil)},
		"nil deny handler":      {WithDenyHandler(nil)},
		"nil status classifier": {WithClassifier(nil)},
		// Given twice, the second would drop the first in silence (a
		// health-check skipper lost to a metrics one).
		"skipper twice":    {WithGuard(g), WithSkipper(skipNone), WithSkipper(skipNone)},
		"classifier twice": {WithGuard(g), WithClassifier(middleware.ClassifyHTTPStatus), WithClassifier(middleware.ClassifyHTTPStatus)},
		"keyer twice":      {WithGuard(g), WithKeyer(keyer), WithKeyer(keyer)},
		"route func twice": {WithGuard(g), WithRouteFunc(routeNone), WithRouteFunc(routeNone)},
		"deny twice":       {WithGuard(g), WithDenyHandler(denyNone), WithDenyHandler(denyNone)},
		"resource twice":   {WithGuard(g), WithRouteResource(), WithRouteResource()},
		"renderer twice":   {WithGuard(g), WithRenderer(middleware.Renderer{}), WithRenderer(middleware.Renderer{})},
		// A handler is never run twice: the retries would do nothing.
		"Guard with retries": {WithGuard(retrying)},
	} {
		mwf, err := Middleware(opts...)
		assert.Error(t, err, name)
		assert.Nil(t, mwf, name)
	}
	_, err = Middleware()
	assert.ErrorContains(t, err, "sluicehttp: no Guard: give WithGuard, or WithRoutes", "no option: nothing guarded")
}

// A request whose client went away counts for nothing, whatever the handler
// then wrote: a proxy's 502 for a cancelled upstream call is not the
// dependency failing.
func TestMiddlewareClientGoneIsIgnored(t *testing.T) {
	c := testpolicy.NewCounter()
	g := newGuard(t, sluice.NewManualClock(0), c)
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		w.WriteHeader(http.StatusBadGateway)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil).WithContext(withDeadlinePassed()))
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1, sluice.Failure: 1}, c.Outcomes(),
		"cancelled by the client: ignored; a passed deadline is the server's own and counts")
}

func withDeadlinePassed() context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	_ = cancel
	return ctx
}

// A Guard's call timeout (sluice.WithTimeout) applies to the handler: its
// context ends at the deadline.
func TestMiddlewareAppliesTheGuardsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		c := testpolicy.NewCounter()
		g, err := sluice.New(sluice.With(c), sluice.WithClock(clk), sluice.WithTimeout(150*time.Millisecond))
		require.NoError(t, err)
		defer g.Close()
		var waited time.Duration
		h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			<-r.Context().Done()
			waited = time.Since(start)
			w.WriteHeader(http.StatusGatewayTimeout)
		}))
		rec := serve(h, http.MethodGet, "/")
		assert.Equal(t, http.StatusGatewayTimeout, rec.Code)
		assert.Equal(t, 150*time.Millisecond, waited)
		assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, c.Outcomes())
	})
}

// A StaleShared cache keeps one copy per route and URI: a client keyed
// apart from the one whose request was kept is answered from it. A cache
// without the option keeps each key's copies apart.
func TestStaleSharedAcrossKeys(t *testing.T) {
	for _, shared := range []bool{false, true} {
		clock := sluice.NewManualClock(time.Hour)
		sw := &switchable{d: sluice.Decision{Policy: "b", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen}}
		var opts []middleware.StaleCacheOption
		if shared {
			opts = append(opts, middleware.StaleShared())
		}
		cache := newStale(t, 8, opts...)
		g := guardWith(t, clock, sw, cache)
		keyer, err := middleware.NewKeyer(middleware.MissingKey{}, middleware.KeyByIP(nil))
		require.NoError(t, err)
		h := mw(t, WithGuard(g), WithKeyer(keyer))(
			http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "prices") }))
		from := func(addr string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodGet, "/prices", nil)
			r.RemoteAddr = addr
			h.ServeHTTP(rec, r)
			return rec
		}
		require.Equal(t, http.StatusOK, from("192.0.2.1:1000").Code)
		sw.on = true
		clock.Advance(3 * time.Second)
		assert.Equal(t, "prices", from("192.0.2.1:1001").Body.String(), "shared %v: the same client", shared)
		rec := from("198.51.100.9:2000")
		if shared {
			assert.Equal(t, http.StatusOK, rec.Code)
			assert.Equal(t, "prices", rec.Body.String())
			assert.Equal(t, "3", rec.Header().Get("Age"))
		} else {
			assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "another client has no copy of its own")
		}
		assert.Equal(t, 1, cache.Len())
	}
}

// Reject answers a rejection that a handler's own call met (here its
// dependency's Guard) as the middleware answers its own: the route's stale
// copy, then the problem body; the route's Guard counts the request Ignored.
func TestRejectAnswersADependencysRejection(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	counter := testpolicy.NewCounter()
	cache := newStale(t, 8)
	g := guardWith(t, clock, counter, cache)
	dep := &switchable{d: sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: 4 * time.Second, Cause: sluice.ErrCircuitOpen}}
	depGuard := newGuard(t, clock, dep)
	var answered []bool
	mux := http.NewServeMux()
	call := func(w http.ResponseWriter, r *http.Request) {
		err := depGuard.Do(r.Context(), func(context.Context) error { return nil })
		if err != nil {
			answered = append(answered, Reject(w, r, err))
			return
		}
		_, _ = io.WriteString(w, "prices #"+strconv.Itoa(len(answered)))
	}
	mux.HandleFunc("GET /prices", call)
	mux.HandleFunc("GET /orders", call)
	mux.HandleFunc("GET /late", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		answered = append(answered, Reject(w, r, sluice.Rejection(dep.d)))
	})
	h := mw(t, WithGuard(g))(mux)

	require.Equal(t, "prices #0", serve(h, http.MethodGet, "/prices").Body.String())
	dep.on = true
	clock.Advance(5 * time.Second)
	rec := serve(h, http.MethodGet, "/prices")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "prices #0", rec.Body.String(), "the stale copy")
	assert.Equal(t, "5", rec.Header().Get("Age"))

	rec = serve(h, http.MethodGet, "/orders")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "no fallback: the problem body")
	assert.Equal(t, "4", rec.Header().Get("Retry-After"))
	assert.Equal(t, routing.ProblemContentType, rec.Header().Get("Content-Type"))

	rec = serve(h, http.MethodGet, "/late")
	assert.Equal(t, http.StatusAccepted, rec.Code, "a response begun is left alone")
	assert.Equal(t, []bool{true, true, false}, answered)
	assert.Equal(t, 2, counter.Outcomes()[sluice.Ignored], "the two requests answered by Reject")
	assert.Equal(t, 2, counter.Outcomes()[sluice.Success], "the first request and /late")
	assert.Equal(t, 1, cache.Len(), "a stale answer is not kept as a good one")

	// Outside the middleware, or for an error that is no rejection, it
	// answers nothing.
	plain := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/prices", nil)
	assert.False(t, Reject(plain, r, sluice.Rejection(dep.d)))
	assert.False(t, Reject(plain, r, context.DeadlineExceeded))
	assert.Equal(t, http.StatusOK, plain.Code)
	assert.Zero(t, plain.Body.Len())

	// Nor with a writer kept past its handler: its request is over, and the
	// pooled writer serves no admitted request until the next one.
	var kept http.ResponseWriter
	keep := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { kept = w }))
	require.Equal(t, http.StatusOK, serve(keep, http.MethodGet, "/prices").Code)
	assert.False(t, Reject(kept, r, sluice.Rejection(dep.d)))
}

// A fallback's answer to Reject in an inner middleware is, for an outer
// one, a rejection by a sluice middleware: Ignored, and no good response to
// keep a stale copy of.
func TestRejectInInnerMiddlewareIsNoGoodResponseForOuter(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	outer := testpolicy.NewCounter()
	outerCache := newStale(t, 8)
	og := guardWith(t, clock, outer, outerCache)
	ig := guardWith(t, clock, testpolicy.NewCounter(), fallbacks(t, degrade.OnCircuitOpen(text(http.StatusOK, "placeholder"))))
	dep := sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.True(t, Reject(w, r, sluice.Rejection(dep)))
	})
	between := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(struct{ unwrapper }{unwrapper{w}}, r)
		})
	}
	h := mw(t, WithGuard(og))(between(mw(t, WithGuard(ig))(handler)))
	rec := serve(h, http.MethodGet, "/prices")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "placeholder", rec.Body.String())
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, outer.Outcomes())
	assert.Zero(t, outerCache.Len(), "a fallback's answer is not kept as a good response")
}

// Reject answers for the route and request the middleware admitted, even
// when the handler gets a request rewritten on its way (http.StripPrefix).
func TestRejectBehindStripPrefixAnswersForTheAdmittedRoute(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	g := guardWith(t, clock, testpolicy.NewCounter(), newStale(t, 8))
	dep := &switchable{d: sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen}}
	depGuard := newGuard(t, clock, dep)
	rs, err := middleware.NewRoutes(middleware.RouteTo("/api/", g))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/api/", http.StripPrefix("/api", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := depGuard.Do(r.Context(), func(context.Context) error { return nil }); err != nil {
			Reject(w, r, err)
			return
		}
		_, _ = io.WriteString(w, "prices")
	})))
	h := mw(t, WithRoutes(rs))(mux)
	require.Equal(t, "prices", serve(h, http.MethodGet, "/api/prices").Body.String())
	dep.on = true
	clock.Advance(2 * time.Second)
	var rec *httptest.ResponseRecorder
	require.NotPanics(t, func() { rec = serve(h, http.MethodGet, "/api/prices") })
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "prices", rec.Body.String(), "the stale copy")
	assert.Equal(t, "2", rec.Header().Get("Age"))
}

// A handler's 5xx is held back for the Guard's fallback declared for
// failures, with the header fields that described its body; without such a
// fallback it goes out as the handler wrote it. Either way the request
// counts as a failure.
func TestFailureFallbackReplacesA5xx(t *testing.T) {
	failing := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Handler", "kept")
		http.Error(w, "down: db at 10.0.0.7", http.StatusInternalServerError)
	})
	for _, tc := range []struct {
		name   string
		rules  []degrade.Rule[http.Handler]
		status int
		body   string
	}{
		{"no failure fallback", []degrade.Rule[http.Handler]{degrade.OnRateLimited(text(http.StatusOK, "later"))}, http.StatusInternalServerError, "down: db at 10.0.0.7\n"},
		{"a failure fallback", []degrade.Rule[http.Handler]{degrade.OnError(text(http.StatusOK, "cached answer"))}, http.StatusOK, "cached answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counter := testpolicy.NewCounter()
			g := guardWith(t, sluice.NewManualClock(0), counter, fallbacks(t, tc.rules...))
			rec := serve(mw(t, WithGuard(g))(failing), http.MethodGet, "/")
			assert.Equal(t, tc.status, rec.Code)
			assert.Equal(t, tc.body, rec.Body.String())
			assert.Equal(t, "kept", rec.Header().Get("X-Handler"))
			if tc.status == http.StatusOK {
				assert.Empty(t, rec.Header().Get("X-Content-Type-Options"), "the dropped body's fields go with it")
			}
			assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, counter.Outcomes())
		})
	}
}

// A rejection's answer is not the handler failing: a Guard whose fallback
// answers the handler's 5xx does not hold back a 503 that answers Reject,
// nor one an inner middleware rejected with, whether the deny handler, a
// fallback or the problem answer writes it.
func TestRejectionAnswersAreNeverHeldForAFailureFallback(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	dep := sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: 4 * time.Second, Cause: sluice.ErrCircuitOpen}
	rejecting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.True(t, Reject(w, r, sluice.Rejection(dep)))
	})
	// Failures only: it declines rejections.
	onlyFailures := degrade.OnError(func(_ context.Context, err error) (http.Handler, error) {
		if errors.Is(err, sluice.ErrRejected) {
			return nil, err
		}
		return text(http.StatusOK, "cached")(context.Background(), err)
	})

	t.Run("Reject answered by a 503 fallback", func(t *testing.T) {
		c := testpolicy.NewCounter()
		g := guardWith(t, clock, c, fallbacks(t, degrade.OnError(text(http.StatusServiceUnavailable, "maintenance"))))
		rec := serve(mw(t, WithGuard(g))(rejecting), http.MethodGet, "/prices")
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.Equal(t, "maintenance", rec.Body.String())
		assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, c.Outcomes())
	})
	t.Run("Reject answered by the problem answer, over a connection", func(t *testing.T) {
		g := guardWith(t, clock, testpolicy.NewCounter(), fallbacks(t, onlyFailures))
		srv := httptest.NewServer(mw(t, WithGuard(g))(rejecting))
		defer srv.Close()
		resp, err := srv.Client().Get(srv.URL + "/prices")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.NoError(t, err, "the body its Content-Length promises arrives")
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Equal(t, routing.ProblemContentType, resp.Header.Get("Content-Type"))
		assert.Equal(t, "4", resp.Header.Get("Retry-After"))
		assert.Contains(t, string(body), "circuit-open")
	})
	t.Run("an inner middleware's rejection", func(t *testing.T) {
		outer := testpolicy.NewCounter()
		og := guardWith(t, clock, outer, fallbacks(t, degrade.OnError(text(http.StatusOK, "outer fallback"))))
		sw := openSwitch()
		sw.on = true
		ig := newGuard(t, clock, sw)
		rec := serve(mw(t, WithGuard(og))(mw(t, WithGuard(ig))(statusHandler(http.StatusOK))), http.MethodGet, "/prices")
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "the inner middleware's answer")
		assert.Equal(t, routing.ProblemContentType, rec.Header().Get("Content-Type"))
		assert.NotEmpty(t, rec.Body.String())
		assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, outer.Outcomes())
	})
}

// A request whose client went away counts for nothing even when a fallback
// of its Guard would answer the handler's failure: no fallback runs for a
// client that is not there, and the breaker does not count the failure.
func TestClientGoneIsIgnoredWithAFailureFallback(t *testing.T) {
	c := testpolicy.NewCounter()
	served := 0
	fb := degrade.OnError(func(context.Context, error) (http.Handler, error) {
		served++
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "fb") }), nil
	})
	g := guardWith(t, sluice.NewManualClock(0), c, fallbacks(t, fb))
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		w.Header().Set("Content-Length", "5")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "proxy")
	}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, c.Outcomes())
	assert.Zero(t, served, "no fallback answers a client that went away")
	assert.Equal(t, http.StatusBadGateway, rec.Code, "the held status goes out")
	assert.Empty(t, rec.Body.String())
	assert.Empty(t, rec.Header().Get("Content-Length"), "without the length of the body it dropped")
}

// The fields that described a failing handler's body leave with it: when a
// fallback answers in its place (a Content-Encoding would mislabel the
// fallback's body) and when the fallback declines and the status goes out
// alone (a Content-Length would promise a body that never comes).
func TestHeldFailureDropsTheFieldsOfItsBody(t *testing.T) {
	failing := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Length", "17")
		w.Header().Set("Etag", `"v1"`)
		w.Header().Set("X-Request-Id", "r1")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"error":"boom!"}`)
	})
	get := func(t *testing.T, h http.Handler) (*http.Response, string) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		resp, err := srv.Client().Get(srv.URL + "/")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.NoError(t, err, "the response is whole")
		return resp, string(body)
	}
	t.Run("answered", func(t *testing.T) {
		g := guardWith(t, sluice.NewManualClock(0), testpolicy.NewCounter(), fallbacks(t, degrade.OnError(text(http.StatusOK, "cached answer"))))
		resp, body := get(t, mw(t, WithGuard(g))(failing))
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "cached answer", body)
		assert.Empty(t, resp.Header.Get("Etag"))
		assert.Equal(t, "r1", resp.Header.Get("X-Request-Id"), "fields of the response, not its body, stay")
	})
	t.Run("declined", func(t *testing.T) {
		declining := degrade.OnError(func(_ context.Context, err error) (http.Handler, error) { return nil, err })
		g := guardWith(t, sluice.NewManualClock(0), testpolicy.NewCounter(), fallbacks(t, declining))
		resp, body := get(t, mw(t, WithGuard(g))(failing))
		assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
		assert.Empty(t, body)
		assert.Empty(t, resp.Header.Get("Content-Encoding"))
		assert.Empty(t, resp.Header.Get("Content-Type"))
	})
}

// An inner middleware's fallback answering its handler's failure is, for
// an outer one, an answer in place of the handler, as its rejections are:
// Ignored, and no good response to keep a stale copy of.
func TestInnerFailureFallbackIsNoGoodResponseForOuter(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	outer := testpolicy.NewCounter()
	outerCache := newStale(t, 8)
	og := guardWith(t, clock, outer, outerCache)
	inner := testpolicy.NewCounter()
	ig := guardWith(t, clock, inner, fallbacks(t, degrade.OnError(text(http.StatusOK, "placeholder"))))
	rec := serve(mw(t, WithGuard(og))(mw(t, WithGuard(ig))(statusHandler(http.StatusInternalServerError))), http.MethodGet, "/prices")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "placeholder", rec.Body.String())
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, inner.Outcomes())
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, outer.Outcomes())
	assert.Zero(t, outerCache.Len(), "the inner fallback's answer is not kept as a good response")
}

// Reject's answer goes out without the fields the handler set for its own
// body.
func TestRejectDropsTheHandlersBodyFields(t *testing.T) {
	g := guardWith(t, sluice.NewManualClock(time.Hour), testpolicy.NewCounter(), fallbacks(t, degrade.OnError(text(http.StatusOK, "fb"))))
	dep := sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen}
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Etag", `"v1"`)
		assert.True(t, Reject(w, r, sluice.Rejection(dep)))
	}))
	rec := serve(h, http.MethodGet, "/prices")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "fb", rec.Body.String())
	assert.Empty(t, rec.Header().Get("Content-Encoding"))
	assert.Empty(t, rec.Header().Get("Etag"))
}

// A handler that writes a 5xx (held for the fallback) and then hijacks its
// connection has nothing written after it by the middleware.
func TestHeldStatusIsNotWrittenOnAHijackedConnection(t *testing.T) {
	g := guardWith(t, sluice.NewManualClock(0), testpolicy.NewCounter(), fallbacks(t, degrade.OnError(text(http.StatusOK, "fb"))))
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if !assert.NoError(t, err) {
			return
		}
		_, _ = brw.WriteString("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		_ = brw.Flush()
		_ = conn.Close()
	}))
	var logged strings.Builder
	var mu sync.Mutex
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(b)
	}), "", 0)
	srv.Start()
	resp, err := srv.Client().Get(srv.URL + "/")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	srv.Close()
	mu.Lock()
	defer mu.Unlock()
	assert.NotContains(t, logged.String(), "hijacked")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// Reject looks the stale copy up under the key the middleware kept it
// under, not an outer middleware's (a per-IP limit's), and answers as the
// middleware answers its own rejection: with the copy.
func TestRejectFindsTheStaleCopyUnderTheMiddlewaresKey(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	og := newGuard(t, clock, testpolicy.NewCounter())
	keyer, err := middleware.NewKeyer(middleware.MissingKey{}, middleware.KeyByIP(nil))
	require.NoError(t, err)
	sw := openSwitch()
	ig := guardWith(t, clock, sw, newStale(t, 8))
	dep := &switchable{d: sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: 4 * time.Second, Cause: sluice.ErrCircuitOpen}}
	depGuard := newGuard(t, clock, dep)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := depGuard.Do(r.Context(), func(context.Context) error { return nil }); err != nil {
			Reject(w, r, err)
			return
		}
		_, _ = io.WriteString(w, "prices")
	})
	h := mw(t, WithGuard(og), WithKeyer(keyer))(mw(t, WithGuard(ig))(handler))
	get := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/prices", nil)
		r.RemoteAddr = "192.0.2.1:1000"
		h.ServeHTTP(rec, r)
		return rec
	}
	require.Equal(t, "prices", get().Body.String())
	clock.Advance(2 * time.Second)

	sw.on = true // the inner middleware's own rejection
	own := get()
	assert.Equal(t, http.StatusOK, own.Code)
	assert.Equal(t, "prices", own.Body.String(), "the middleware's own rejection: the stale copy")
	sw.on = false

	dep.on = true // the same rejection, met by the handler and passed to Reject
	rej := get()
	assert.Equal(t, http.StatusOK, rej.Code, "Reject should answer as the middleware does")
	assert.Equal(t, "prices", rej.Body.String(), "Reject should serve the same stale copy")
}

// A handler that wrote nothing by the Guard's deadline timed out, whether
// or not a fallback answers it: the call counts as a failure, and its
// empty answer is no good copy to keep.
func TestNothingWrittenByTheDeadlineIsATimeout(t *testing.T) {
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // the dependency did not answer in time
	})
	// With a fallback for timeouts, the middleware counts it a failure.
	declared := testpolicy.NewCounter()
	fg, err := sluice.New(sluice.With(declared), sluice.WithTimeout(20*time.Millisecond),
		sluice.WithFallback(fallbacks(t, degrade.OnTimeout(text(http.StatusOK, "later")))))
	require.NoError(t, err)
	defer fg.Close()
	require.Equal(t, "later", serve(mw(t, WithGuard(fg))(slow), http.MethodGet, "/prices").Body.String())
	require.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, declared.Outcomes())

	clock := sluice.NewManualClock(time.Hour)
	sw := openSwitch()
	counter := testpolicy.NewCounter()
	cache := newStale(t, 8)
	g, err := sluice.New(sluice.With(counter, sw), sluice.WithClock(clock),
		sluice.WithFallback(cache), sluice.WithTimeout(20*time.Millisecond))
	require.NoError(t, err)
	defer g.Close()
	h := mw(t, WithGuard(g))(slow)
	serve(h, http.MethodGet, "/prices")
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, counter.Outcomes(), "timed out with nothing written")
	assert.Zero(t, cache.Len(), "a timed-out empty answer is no good response to keep")

	sw.on = true
	rec := serve(h, http.MethodGet, "/prices")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "the rejection, not an empty stale 200 (body %q, Age %q)", rec.Body.String(), rec.Header().Get("Age"))
}

// A stale copy answering a handler's failure is aged from when it answers,
// not from the request's arrival: a copy 70 s old, from a cache whose
// maxAge is a minute, is not served.
func TestAStaleAnswerToAFailureIsAgedFromNow(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	cache := newStale(t, 8) // maxAge: one minute
	g := guardWith(t, clock, testpolicy.NewCounter(), cache)
	n := 0
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n++
		if n == 1 {
			_, _ = io.WriteString(w, "prices v1")
			return
		}
		clock.Advance(20 * time.Second) // a slow dependency
		w.WriteHeader(http.StatusBadGateway)
	}))
	require.Equal(t, "prices v1", serve(h, http.MethodGet, "/prices").Body.String())
	clock.Advance(50 * time.Second)
	rec := serve(h, http.MethodGet, "/prices") // answered 70 s after the copy was stored
	assert.Equal(t, http.StatusBadGateway, rec.Code, "a copy 70 s old, served with Age %q", rec.Header().Get("Age"))
}

// A fallback that replaces a failed handler's answer goes out without the
// freshness that answer declared: a placeholder must not be cached for an
// hour.
func TestAFallbackAnswerDropsTheFailedBodysFreshness(t *testing.T) {
	g := guardWith(t, sluice.NewManualClock(0), testpolicy.NewCounter(),
		fallbacks(t, degrade.OnError(text(http.StatusOK, "prices are unavailable, try again shortly"))))
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Expires", "Thu, 01 Jan 2099 00:00:00 GMT")
		w.Header().Set("Etag", `"v1"`)
		w.WriteHeader(http.StatusInternalServerError) // the dependency failed
	}))
	rec := serve(h, http.MethodGet, "/prices")
	require.Equal(t, "prices are unavailable, try again shortly", rec.Body.String())
	require.Empty(t, rec.Header().Get("Etag"), "the dropped body's validator goes")
	assert.Empty(t, rec.Header().Get("Cache-Control"), "the dropped body's freshness stays on the placeholder")
	assert.Empty(t, rec.Header().Get("Expires"))
}

// A rejection a handler met elsewhere (its dependency's limiter) and passes
// to Reject describes that limiter's quota: its RateLimit-Policy field does
// not take the window of a policy of the same name (a default name) in the
// route's Guard.
func TestRejectNamesNoWindowOfTheRoutesSameNamedPolicy(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	own, err := ratelimit.NewFixedWindow(100, time.Minute)
	require.NoError(t, err)
	dep, err := ratelimit.NewFixedWindow(1, time.Second)
	require.NoError(t, err)
	require.Equal(t, own.Name(), dep.Name())
	depGuard := newGuard(t, clock, dep)
	h := mw(t, WithGuard(newGuard(t, clock, own)))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := depGuard.Do(r.Context(), func(context.Context) error { return nil }); err != nil {
			Reject(w, r, err)
		}
	}))
	require.Equal(t, http.StatusOK, serve(h, http.MethodGet, "/").Code)
	rec := serve(h, http.MethodGet, "/")
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, `"ratelimit/fixed-window";q=1`, rec.Header().Get(routing.FieldRateLimitPolicy))
}

// A fallback whose function answers a nil handler (no page in its map for
// the route) answers nothing: the client gets the rejection, and no
// fallback is counted as served.
func TestFallbackAnsweringANilHandlerIsNotServed(t *testing.T) {
	pages := map[string]http.Handler{} // no page for this route
	fb := fallbacks(t, degrade.OnCircuitOpen(func(ctx context.Context, err error) (http.Handler, error) {
		r, _ := sluice.ResourceFrom(ctx)
		return pages[r], nil
	}))
	served := 0
	g, err := sluice.New(sluice.With(openSwitch()), sluice.WithClock(sluice.NewManualClock(time.Hour)),
		sluice.WithFallback(fb),
		sluice.OnFallback(func(context.Context, sluice.FallbackEvent) { served++ }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	sw := g.Policies()[0].(*switchable)
	sw.on = true
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items", func(http.ResponseWriter, *http.Request) {})
	h := mw(t, WithGuard(g))(mux)
	rec := serve(h, http.MethodGet, "/items")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Zero(t, served, "the client got the rejection: no fallback served it")
	assert.Zero(t, g.Stats().Fallbacks)
}
