package sluicehttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
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
func (s *switchable) Admit(context.Context, time.Duration) sluice.Verdict {
	if s.on {
		return sluice.Verdict{Limit: s.d.Limit, Remaining: s.d.Remaining, Reset: s.d.Reset,
			RetryAfter: s.d.RetryAfter, Cause: s.d.Cause}
	}
	return sluice.Verdict{Limit: -1}
}
func (*switchable) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (*switchable) Needs() sluice.Needs                                              { return 0 }

// newStale returns a StaleCache of maxEntries copies, kept a minute, of
// bodies up to 1 KiB, and the StaleFallback that answers from it.
func newStale(t *testing.T, maxEntries int, opts ...StaleCacheOption) (*StaleCache, Fallback) {
	t.Helper()
	cache, err := NewStaleCache(maxEntries, time.Minute, 1024, opts...)
	require.NoError(t, err)
	stale, err := StaleFallback(cache)
	require.NoError(t, err)
	return cache, stale
}

func TestStaleFallbackServesLastGoodResponseWithAge(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	sw := &switchable{d: sluice.Decision{Policy: "b", Limit: -1, RetryAfter: 5 * time.Second, Cause: sluice.ErrCircuitOpen}}
	g := newGuard(t, clock, sw)
	cache, stale := newStale(t, 2)
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
	h := Middleware(WithGuard(g), WithFallback("", sluice.CauseCircuitOpen, stale))(mux)

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
	assert.Equal(t, "2#2", serve(h, http.MethodGet, "/items/2").Body.String())
	for _, path := range []string{"/items/3", "/private", "/big", "/fails"} {
		assert.Equal(t, http.StatusServiceUnavailable, serve(h, http.MethodGet, path).Code, path)
	}
	clock.Advance(time.Minute)
	assert.Equal(t, http.StatusServiceUnavailable, serve(h, http.MethodGet, "/items/1").Code, "too old")
	assert.Equal(t, 3, n)
}

// A stale copy is of a GET response, and answers only GET and HEAD (its
// header fields, without the body): a request of another method may change
// state, so a copy of a GET is no answer to it, and it is rejected as usual.
func TestStaleCopyAnswersOnlyGetAndHead(t *testing.T) {
	clock, sw, g, cache, stale := staleSetup(t)
	h := Middleware(WithGuard(g), WithFallback("", sluice.CauseNone, stale))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, r.Method+" answer")
	}))
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodHead} {
		serve(h, m, "/orders")
	}
	assert.Zero(t, cache.Len(), "only GET responses are kept")
	assert.Equal(t, "GET answer", serve(h, http.MethodGet, "/orders").Body.String())
	assert.Equal(t, 1, cache.Len())

	sw.on = true
	clock.Advance(3 * time.Second)
	rec := serve(h, http.MethodGet, "/orders")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "GET answer", rec.Body.String())
	rec = serve(h, http.MethodHead, "/orders")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Empty(t, rec.Body.String())
	assert.Equal(t, "text/plain", rec.Header().Get("Content-Type"))
	assert.Equal(t, "10", rec.Header().Get("Content-Length"))
	assert.Equal(t, "3", rec.Header().Get("Age"))
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
		rec = serve(h, m, "/orders")
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, m)
		assert.Equal(t, middleware.ProblemContentType, rec.Header().Get("Content-Type"), m)
	}
}

// Every stale fallback that may answer a route keeps copies of its good
// responses, each as large as its own maxBody allows, and none that cannot
// answer it does: a route's own fallback for every cause takes the place of
// the general ones, and its own fallback for a cause that of the general
// one for that cause.
func TestEveryStaleFallbackThatMayAnswerKeepsACopy(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	sw := &switchable{}
	g := newGuard(t, clock, sw)
	newCache := func(maxBody int) (*StaleCache, Fallback) {
		c, err := NewStaleCache(8, time.Minute, maxBody)
		require.NoError(t, err)
		fb, err := StaleFallback(c)
		require.NoError(t, err)
		return c, fb
	}
	aLimited, fbALimited := newCache(4)
	general, fbGeneral := newCache(1024)
	generalLimited, fbGeneralLimited := newCache(1024)
	generalOpen, fbGeneralOpen := newCache(1024)
	static, err := StaticFallback(http.StatusOK, nil, []byte("static"))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /a/{x}", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.PathValue("x")) })
	mux.HandleFunc("GET /b", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "b") })
	mux.HandleFunc("GET /c", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "c") })
	h := Middleware(WithGuard(g),
		WithFallback("GET /a/{x}", sluice.CauseRateLimited, fbALimited),
		WithFallback("", sluice.CauseRateLimited, fbGeneralLimited), // never answers /a/{x} or /b
		WithFallback("", sluice.CauseNone, fbGeneral),
		WithFallback("", sluice.CauseCircuitOpen, fbGeneralOpen),
		WithFallback("GET /b", sluice.CauseNone, static), // /b: no stale fallback
	)(mux)

	for _, p := range []string{"/a/1", "/a/longer", "/b", "/c"} {
		serve(h, http.MethodGet, p)
	}
	assert.Equal(t, 1, aLimited.Len(), "/a/1 only: /a/longer is over its maxBody")
	assert.Equal(t, 3, general.Len(), "/a/1, /a/longer and /c")
	assert.Equal(t, 3, generalOpen.Len(), "/a/1, /a/longer and /c")
	assert.Equal(t, 1, generalLimited.Len(), "/c")

	for _, tt := range []struct {
		cause  error
		path   string
		status int
		body   string
	}{
		{sluice.ErrRateLimited, "/a/1", http.StatusOK, "1"},
		{sluice.ErrRateLimited, "/a/longer", http.StatusTooManyRequests, ""},
		{sluice.ErrCircuitOpen, "/a/longer", http.StatusOK, "longer"},
		{sluice.ErrOverloaded, "/a/longer", http.StatusOK, "longer"},
		{sluice.ErrRateLimited, "/c", http.StatusOK, "c"},
		{sluice.ErrRateLimited, "/b", http.StatusOK, "static"},
	} {
		sw.on, sw.d = true, sluice.Decision{Policy: "p", Limit: -1, RetryAfter: time.Second, Cause: tt.cause}
		rec := serve(h, http.MethodGet, tt.path)
		assert.Equal(t, tt.status, rec.Code, "%s %v", tt.path, tt.cause)
		if tt.body != "" {
			assert.Equal(t, tt.body, rec.Body.String(), "%s %v", tt.path, tt.cause)
		}
	}
}

func TestStaleCacheIsBounded(t *testing.T) {
	c, err := NewStaleCache(3, time.Hour, 10)
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for i := range 10 {
		c.store(staleID{"", "k" + strconv.Itoa(i), r}, 200, http.Header{}, []byte("x"), 0)
	}
	assert.Equal(t, 3, c.Len())
	_, _, ok := c.load(c.entryKey(staleID{"", "k9", r}), 0)
	assert.True(t, ok)
	_, _, ok = c.load(c.entryKey(staleID{"", "k0", r}), 0)
	assert.False(t, ok)
}

func TestStaticAndHandlerFallbacks(t *testing.T) {
	limited := sluice.Decision{Policy: "p", Limit: 1, RetryAfter: time.Second, Cause: sluice.ErrRateLimited}
	open := sluice.Decision{Policy: "b", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen}
	static, err := StaticFallback(http.StatusOK, http.Header{"Content-Type": {"text/plain"}}, []byte("cached menu"))
	require.NoError(t, err)
	handler, err := HandlerFallback(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := RejectionFrom(r)
		require.True(t, ok)
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "degraded:"+sluice.CauseOf(d.Cause).String())
	}))
	require.NoError(t, err)

	for _, tt := range []struct {
		name   string
		d      sluice.Decision
		route  string
		opts   []Option
		status int
		body   string
	}{
		{"static for any route and cause", limited, "/a", []Option{WithFallback("", sluice.CauseNone, static)}, 200, "cached menu"},
		{"cause-specific wins", open, "/a", []Option{WithFallback("", sluice.CauseNone, static), WithFallback("", sluice.CauseCircuitOpen, handler)}, 202, "degraded:circuit-open"},
		{"route-specific wins", limited, "/a", []Option{WithFallback("", sluice.CauseRateLimited, handler), WithFallback("GET /a", sluice.CauseNone, static)}, 200, "cached menu"},
		{"other route gets none", limited, "/b", []Option{WithFallback("GET /a", sluice.CauseNone, static)}, 429, ""},
		{"other cause gets none", limited, "/a", []Option{WithFallback("", sluice.CauseCircuitOpen, static)}, 429, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newGuard(t, sluice.NewManualClock(0), testpolicy.Rejecter{D: tt.d})
			mux := http.NewServeMux()
			mux.Handle("GET /a", statusHandler(200))
			mux.Handle("GET /b", statusHandler(200))
			h := Middleware(append([]Option{WithGuard(g)}, tt.opts...)...)(mux)
			rec := serve(h, http.MethodGet, tt.route)
			assert.Equal(t, tt.status, rec.Code)
			if tt.body != "" {
				assert.Equal(t, tt.body, rec.Body.String())
			} else {
				assert.Equal(t, middleware.ProblemContentType, rec.Header().Get("Content-Type"))
			}
		})
	}
}

func TestFallbackConstructorsValidate(t *testing.T) {
	_, err := StaticFallback(99, nil, nil)
	assert.Error(t, err)
	_, err = StaticFallback(600, nil, nil)
	assert.Error(t, err)
	_, err = HandlerFallback(nil)
	assert.Error(t, err)
	_, err = StaleFallback(nil)
	assert.Error(t, err)
	for _, args := range [][3]int{{0, 1, 1}, {1, 0, 1}, {1, 1, 0}} {
		_, err = NewStaleCache(args[0], time.Duration(args[1])*time.Second, args[2])
		assert.Error(t, err)
	}
}

// The stale cache serves one request's answer to others, so it keeps only
// answers a shared cache would: none marked private, none setting a cookie or
// varying with request fields, and none to a request with credentials unless
// marked public.
func TestStaleCacheKeepsNoPersonalAnswer(t *testing.T) {
	tests := []struct {
		name    string
		reqHdr  http.Header
		respHdr http.Header
		kept    bool
	}{
		{"plain", nil, nil, true},
		{"private", nil, http.Header{"Cache-Control": {"max-age=60, private"}}, false},
		{"no-store", nil, http.Header{"Cache-Control": {"no-store"}}, false},
		{"sets a cookie", nil, http.Header{"Set-Cookie": {"s=1"}}, false},
		{"varies", nil, http.Header{"Vary": {"Accept-Language"}}, false},
		{"request with Authorization", http.Header{"Authorization": {"Bearer alice"}}, nil, false},
		{"request with a cookie", http.Header{"Cookie": {"session=alice"}}, nil, false},
		{"credentials but public", http.Header{"Authorization": {"Bearer alice"}}, http.Header{"Cache-Control": {"public, max-age=60"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewStaleCache(8, time.Hour, 1024)
			require.NoError(t, err)
			r := httptest.NewRequest(http.MethodGet, "/me", nil)
			for k, v := range tt.reqHdr {
				r.Header[k] = v
			}
			h := http.Header{}
			for k, v := range tt.respHdr {
				h[k] = v
			}
			c.store(staleID{"", "k", r}, http.StatusOK, h, []byte("alice's account"), 0)
			assert.Equal(t, tt.kept, c.Len() == 1)
		})
	}
}

// A request whose client went away counts for nothing, whatever the handler
// then wrote: a proxy's 502 for a cancelled upstream call is not the
// dependency failing.
func TestMiddlewareClientGoneIsIgnored(t *testing.T) {
	c := testpolicy.NewCounter()
	g := newGuard(t, sluice.NewManualClock(0), c)
	h := Middleware(WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		clk := sluice.NewMonotonicClock()
		c := testpolicy.NewCounter()
		g, err := sluice.New(sluice.With(c), sluice.WithClock(clk), sluice.WithTimeout(150*time.Millisecond))
		require.NoError(t, err)
		defer g.Close()
		var waited time.Duration
		h := Middleware(WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

// staleSetup returns a Guard that rejects with an open circuit while sw.on,
// and a stale fallback answering from cache (8 copies, a minute old at most).
func staleSetup(t *testing.T) (*sluice.ManualClock, *switchable, *sluice.Guard, *StaleCache, Fallback) {
	t.Helper()
	clock := sluice.NewManualClock(time.Hour)
	sw := &switchable{d: sluice.Decision{Policy: "b", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen}}
	g := newGuard(t, clock, sw)
	cache, stale := newStale(t, 8)
	return clock, sw, g, cache, stale
}

// A StaleShared cache keeps one copy per route and URI: a client keyed
// apart from the one whose request was kept is answered from it. A cache
// without the option keeps each key's copies apart.
func TestStaleSharedAcrossKeys(t *testing.T) {
	for _, shared := range []bool{false, true} {
		clock := sluice.NewManualClock(time.Hour)
		sw := &switchable{d: sluice.Decision{Policy: "b", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen}}
		g := newGuard(t, clock, sw)
		var opts []StaleCacheOption
		if shared {
			opts = append(opts, StaleShared())
		}
		cache, stale := newStale(t, 8, opts...)
		keyer, err := middleware.NewKeyer(middleware.MissingKey{}, middleware.KeyByIP(nil))
		require.NoError(t, err)
		h := Middleware(WithGuard(g), WithKeyer(keyer), WithFallback("", sluice.CauseCircuitOpen, stale))(
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
	g := newGuard(t, clock, counter)
	dep := &switchable{d: sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: 4 * time.Second, Cause: sluice.ErrCircuitOpen}}
	depGuard := newGuard(t, clock, dep)
	cache, stale := newStale(t, 8)
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
	h := Middleware(WithGuard(g), WithFallback("GET /prices", sluice.CauseCircuitOpen, stale))(mux)

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
	assert.Equal(t, middleware.ProblemContentType, rec.Header().Get("Content-Type"))

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
}

// A fallback's answer to Reject in an inner middleware is, for an outer
// one, a rejection by a sluice middleware: Ignored, and no good response to
// keep a stale copy of.
func TestRejectInInnerMiddlewareIsNoGoodResponseForOuter(t *testing.T) {
	clock := sluice.NewManualClock(time.Hour)
	outer := testpolicy.NewCounter()
	og := newGuard(t, clock, outer)
	ig := newGuard(t, clock, testpolicy.NewCounter())
	outerCache, outerStale := newStale(t, 8)
	static, err := StaticFallback(http.StatusOK, nil, []byte("placeholder"))
	require.NoError(t, err)
	dep := sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.True(t, Reject(w, r, sluice.Rejection(dep)))
	})
	between := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(struct{ unwrapper }{unwrapper{w}}, r)
		})
	}
	h := Middleware(WithGuard(og), WithFallback("", sluice.CauseNone, outerStale))(
		between(Middleware(WithGuard(ig), WithFallback("", sluice.CauseCircuitOpen, static))(handler)))
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
	g := newGuard(t, clock, testpolicy.NewCounter())
	dep := &switchable{d: sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen}}
	depGuard := newGuard(t, clock, dep)
	_, stale := newStale(t, 8)
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
	h := Middleware(WithRoutes(rs), WithFallback("", sluice.CauseCircuitOpen, stale))(mux)
	require.Equal(t, "prices", serve(h, http.MethodGet, "/api/prices").Body.String())
	dep.on = true
	clock.Advance(2 * time.Second)
	var rec *httptest.ResponseRecorder
	require.NotPanics(t, func() { rec = serve(h, http.MethodGet, "/api/prices") })
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "prices", rec.Body.String(), "the stale copy")
	assert.Equal(t, "2", rec.Header().Get("Age"))
}
