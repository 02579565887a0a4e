package sluicehttp

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
)

// Option configures Middleware. A nil argument to an option leaves its
// default in place.
type Option func(*config)

type config struct {
	routes    *middleware.Routes
	routeFunc func(*http.Request) string
	keyer     *middleware.Keyer
	skip      func(*http.Request) bool
	deny      func(http.ResponseWriter, *http.Request, sluice.Decision)
	classify  middleware.StatusClassifier
	render    middleware.Renderer
	fallbacks map[middleware.FallbackKey]Fallback
	resources bool
	// staleByRoute and staleOthers are the stale caches that keep the good
	// GET responses of each route named by a fallback, and of the others.
	staleByRoute map[string]*staleSet
	staleOthers  *staleSet
}

// WithRoutes guards requests with the Guard their route maps to in rs.
// Without it (and without WithGuard) every request passes through.
func WithRoutes(rs *middleware.Routes) Option {
	return func(c *config) {
		if rs != nil {
			c.routes = rs
		}
	}
}

// WithGuard guards every request with g: shorthand for WithRoutes with g as
// the only, default, route.
func WithGuard(g *sluice.Guard) Option {
	return func(c *config) {
		if g == nil {
			return
		}
		rs, err := middleware.NewRoutes(middleware.DefaultRoute(g))
		if err == nil {
			c.routes = rs
		}
	}
}

// WithRouteFunc names a request's route with fn, for routers other than
// http.ServeMux. By default the route is the http.ServeMux pattern: the
// pattern the mux would pick when the middleware wraps the mux itself (even
// when that mux is mounted under an outer one, which has set the request's
// Pattern to its own), else the request's Pattern, set by the mux the
// middleware's handler is registered on.
func WithRouteFunc(fn func(*http.Request) string) Option {
	return func(c *config) {
		if fn != nil {
			c.routeFunc = fn
		}
	}
}

// WithKeyer puts the key k finds for each request in its context
// (sluice.WithKey), with the route as its resource (sluice.WithResource), for
// the keyed policies of the Guard. A request without a key is handled as k's
// MissingKey says: rejected with 400 Bad Request, or put in a shared bucket.
// Default: no key.
func WithKeyer(k *middleware.Keyer) Option {
	return func(c *config) {
		if k != nil {
			c.keyer = k
		}
	}
}

// WithRouteResource puts each request's route in its context as its
// resource (sluice.WithResource), for policies that keep state per resource,
// such as a breaker.Group giving each route its own breaker under one Guard.
// It costs the request a new context and a copy of the request (two
// allocations). WithKeyer
// does it as well. Default: off.
func WithRouteResource() Option {
	return func(c *config) { c.resources = true }
}

// WithSkipper lets the requests for which fn reports true bypass the guard
// (health checks, metrics). Default: none bypass it. fn runs first, before
// the route is looked up. To let a route through by its pattern, as
// middleware.SkipRoutes does for the gRPC adapter, map the pattern to a nil
// Guard in the route table: middleware.RouteTo("GET /healthz", nil).
func WithSkipper(fn func(*http.Request) bool) Option {
	return func(c *config) {
		if fn != nil {
			c.skip = fn
		}
	}
}

// WithDenyHandler answers rejections that no fallback answers with fn
// instead of the default problem response. fn gets the rejecting Decision.
func WithDenyHandler(fn func(w http.ResponseWriter, r *http.Request, d sluice.Decision)) Option {
	return func(c *config) {
		if fn != nil {
			c.deny = fn
		}
	}
}

// WithClassifier decides from a response's status what it says about the
// handler's health. Default: middleware.ClassifyHTTPStatus (5xx Failure, 4xx
// Ignored).
func WithClassifier(fn middleware.StatusClassifier) Option {
	return func(c *config) {
		if fn != nil {
			c.classify = fn
		}
	}
}

// WithLegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset to the IETF draft fields. Default: off.
func WithLegacyHeaders() Option {
	return func(c *config) { c.render.Legacy = true }
}

// WithRenderer replaces the whole rendering configuration (legacy fields,
// quiet admitted responses, problem type base). Default: the zero
// middleware.Renderer.
func WithRenderer(r middleware.Renderer) Option {
	return func(c *config) { c.render = r }
}

// WithFallback answers the requests of route rejected for cause with fb
// instead of a rejection. route "" stands for every route and cause
// sluice.CauseNone for every cause; the most specific fallback wins: route
// and cause, route, cause, then neither. A stale fallback (StaleFallback)
// answers only GET and HEAD requests, from copies of good GET responses;
// every stale fallback that may answer a route keeps a copy of that route's
// good GET responses.
func WithFallback(route string, cause sluice.Cause, fb Fallback) Option {
	return func(c *config) {
		if fb.static == nil && fb.handler == nil && fb.stale == nil {
			return
		}
		if c.fallbacks == nil {
			c.fallbacks = make(map[middleware.FallbackKey]Fallback)
		}
		c.fallbacks[middleware.FallbackKey{Route: route, Cause: cause}] = fb
	}
}

// Middleware returns net/http middleware that runs each request through the
// Guard of its route. An admitted request gets the RateLimit fields of its
// Decision and runs; its outcome, classified from the final status, is
// reported to the Guard when the handler returns. A rejected request is
// answered by a fallback, the deny handler, or a problem response: 429 or
// 503 with Retry-After, the RateLimit fields and an RFC 9457 body.
func Middleware(opts ...Option) func(http.Handler) http.Handler {
	c := config{classify: middleware.ClassifyHTTPStatus}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	c.staleByRoute, c.staleOthers = staleSets(c.fallbacks)
	return func(next http.Handler) http.Handler {
		h := &handler{config: c, next: next}
		h.mux, _ = next.(*http.ServeMux)
		h.needPattern = c.routes.NeedsPattern() || c.keyer != nil || c.resources || len(c.fallbacks) > 0
		return h
	}
}

type handler struct {
	config
	next        http.Handler
	mux         *http.ServeMux
	needPattern bool
}

func (h *handler) pattern(r *http.Request) string {
	if h.routeFunc != nil {
		return h.routeFunc(r)
	}
	if h.mux == nil {
		return r.Pattern
	}
	// The wrapped mux picks the route, whatever Pattern an outer mux (one
	// that mounts it under a prefix) has already set.
	_, p := h.mux.Handler(r)
	return p
}

// route returns r's route pattern, when the middleware needs it, and the
// table's Route for it.
func (h *handler) route(r *http.Request) (string, *middleware.Route) {
	if h.needPattern {
		pattern := h.pattern(r)
		return pattern, h.routes.Match(pattern)
	}
	return "", h.routes.Default()
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.skip != nil && h.skip(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	var pattern string
	rt := h.routes.Default()
	if h.needPattern {
		pattern, rt = h.route(r)
	}
	if rt == nil {
		h.next.ServeHTTP(w, r)
		return
	}
	rw := getWriter(w)
	var key string
	if h.keyer != nil {
		// The pooled writer carries the request's view, so the key
		// functions see it without an allocation of its own.
		rw.view = request{r: r, pattern: pattern}
		ctx, err := h.keyer.Context(r.Context(), &rw.view)
		rw.view = request{}
		if err != nil {
			putWriter(rw)
			h.missingKey(w, r)
			return
		}
		key, _ = sluice.KeyFrom(ctx)
		r = r.WithContext(ctx)
	} else if h.resources && pattern != "" {
		r = r.WithContext(sluice.WithResource(r.Context(), pattern))
	}
	call, err := rt.Guard.Begin(r.Context())
	if err != nil {
		putWriter(rw)
		h.rejected(w, r, rt, pattern, key, call.Decision(), call.Start())
		return
	}
	h.render.Admitted(w.Header(), rt, call.Decision())
	rw.h, rw.req, rw.start = h, r, call.Start()
	var stale *staleSet
	if len(h.fallbacks) > 0 && r.Method == http.MethodGet {
		if stale = h.staleFor(pattern); stale != nil {
			rw.capturing = true
			rw.maxCapture = stale.maxBody
		}
	}
	defer h.finish(rw, &call, stale, r, pattern, key)
	if ctx := call.Context(); ctx != r.Context() {
		// The Guard's call timeout (sluice.WithTimeout): the handler's
		// context ends at the deadline. What the handler then writes is its
		// answer (a 5xx counts as a failure).
		h.next.ServeHTTP(rw, r.WithContext(ctx))
		return
	}
	h.next.ServeHTTP(rw, r)
}

// finish reports the request's outcome; it runs deferred so that a panic in
// the handler is reported as a Failure (http.ErrAbortHandler, the client
// going away, as Ignored) before it goes on up.
func (h *handler) finish(rw *responseWriter, call *sluice.Call, stale *staleSet, r *http.Request, pattern, key string) {
	if p := recover(); p != nil {
		if p == http.ErrAbortHandler {
			call.Report(sluice.Ignored, nil)
		} else {
			call.Report(sluice.Failure, nil)
		}
		putWriter(rw)
		panic(p)
	}
	var o sluice.Outcome
	switch {
	case rw.rejected:
		o = sluice.Ignored
	case rw.hijacked && rw.status == 0:
		o = sluice.Success
	case errors.Is(r.Context().Err(), context.Canceled):
		// The client went away: whatever the handler wrote (a proxy's 502)
		// says nothing of the dependency.
		o = sluice.Ignored
	default:
		o = h.classify(rw.status)
	}
	call.Report(o, nil)
	// A hijacked connection has no HTTP response to keep, whatever its
	// status says.
	if stale != nil && rw.capturing && !rw.hijacked && o == sluice.Success && (rw.status == http.StatusOK || rw.status == 0) {
		id, now := staleID{pattern, key, r}, call.Start()
		for _, c := range stale.caches {
			c.store(id, http.StatusOK, rw.Header(), rw.capture, now)
		}
	}
	putWriter(rw)
}

// staleSet is the stale caches that keep the good GET responses of a route.
type staleSet struct {
	caches  []*StaleCache
	maxBody int // the largest maxBody of caches: how much body to capture
}

func (s *staleSet) add(c *StaleCache) {
	if slices.Contains(s.caches, c) {
		return
	}
	s.caches = append(s.caches, c)
	s.maxBody = max(s.maxBody, c.maxBody)
}

// staleSets returns, for each route that fallbacks name and for every other
// route, the caches of the stale fallbacks that may answer its requests,
// each cache once: those of the route's own fallbacks, and those of route
// "" unless a fallback of the route takes their place (the route's for
// every cause, or for the same cause). A route whose requests no stale
// fallback answers has none.
func staleSets(fallbacks map[middleware.FallbackKey]Fallback) (map[string]*staleSet, *staleSet) {
	var others *staleSet
	byRoute := make(map[string]*staleSet)
	for k, fb := range fallbacks {
		if k.Route != "" {
			byRoute[k.Route] = nil
		} else if fb.stale != nil {
			if others == nil {
				others = &staleSet{}
			}
			others.add(fb.stale)
		}
	}
	for route := range byRoute {
		s := &staleSet{}
		_, everyCause := fallbacks[middleware.FallbackKey{Route: route, Cause: sluice.CauseNone}]
		for k, fb := range fallbacks {
			if fb.stale == nil {
				continue
			}
			switch k.Route {
			case route:
				s.add(fb.stale)
			case "":
				if _, shadowed := fallbacks[middleware.FallbackKey{Route: route, Cause: k.Cause}]; !everyCause && !shadowed {
					s.add(fb.stale)
				}
			}
		}
		if len(s.caches) == 0 {
			s = nil
		}
		byRoute[route] = s
	}
	return byRoute, others
}

// staleFor returns the stale caches that keep the good GET responses of
// route pattern, or nil.
func (h *handler) staleFor(pattern string) *staleSet {
	if s, ok := h.staleByRoute[pattern]; ok {
		return s
	}
	return h.staleOthers
}

type rejectionKey struct{}

// RejectionFrom returns the Decision that rejected r, for fallback and deny
// handlers, and false when r was not rejected.
func RejectionFrom(r *http.Request) (sluice.Decision, bool) {
	d, ok := r.Context().Value(rejectionKey{}).(sluice.Decision)
	return d, ok
}

// Reject answers r, in a handler behind Middleware, as the middleware
// answers its own rejections, for a sluice rejection err that a call the
// handler made met: a Transport's breaker open for the dependency, a Guard
// of the handler's own. The route's fallback for the cause answers (the
// stale copy of the route's last good response, say), else the deny
// handler, else 429 or 503 with Retry-After and a problem body; the
// request then counts as Ignored for the route's Guard, as another
// policy's rejection does. It reports false, having written nothing, when
// err is no sluice rejection (a timeout wrapping one is a timeout), when w
// is not the writer the middleware handed to the handler of a request it
// admitted (or one wrapping it; a request it let through unguarded, skipped
// or on a route without a Guard, has none), or when the response has begun.
func Reject(w http.ResponseWriter, r *http.Request, err error) bool {
	d, ok := sluice.RejectionOf(err)
	if !ok {
		return false
	}
	rw := writerIn(w)
	if rw == nil || rw.h == nil || rw.status != 0 || rw.hijacked {
		return false
	}
	// The answer is for the request the middleware admitted, on its route
	// (the handler's r may have been rewritten on its way, by
	// http.StripPrefix say); for a sluice middleware around this one it is
	// a rejection, as this one's own are.
	markRejected(rw.w)
	h, ar := rw.h, rw.req
	pattern, rt := h.route(ar)
	key, _ := sluice.KeyFrom(ar.Context())
	h.rejected(rw, ar, rt, pattern, key, d, rw.start)
	return true
}

// rejected answers r, rejected with d; now is an instant on the Guard's
// clock, to tell the age of a stale answer by.
func (h *handler) rejected(w http.ResponseWriter, r *http.Request, rt *middleware.Route, pattern, key string, d sluice.Decision, now time.Duration) {
	markRejected(w)
	if len(h.fallbacks) > 0 {
		if fb, ok := middleware.LookupFallback(h.fallbacks, pattern, sluice.CauseOf(d.Cause)); ok {
			fr := r
			if fb.handler != nil {
				fr = r.WithContext(context.WithValue(r.Context(), rejectionKey{}, d))
			}
			if fb.serve(w, fr, staleID{pattern, key, r}, now) {
				return
			}
		}
	}
	if h.deny != nil {
		h.deny(w, r.WithContext(context.WithValue(r.Context(), rejectionKey{}, d)), d)
		return
	}
	status := h.render.Rejected(w.Header(), rt, d)
	body := h.render.AppendProblem(make([]byte, 0, 256), d)
	writeProblem(w, r, status, body)
}

func (h *handler) missingKey(w http.ResponseWriter, r *http.Request) {
	markRejected(w)
	hd := w.Header()
	hd.Set("Content-Type", middleware.ProblemContentType)
	hd.Set("Cache-Control", "no-store")
	writeProblem(w, r, http.StatusBadRequest, h.render.AppendMissingKeyProblem(make([]byte, 0, 256)))
}

func writeProblem(w http.ResponseWriter, r *http.Request, status int, body []byte) {
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}
