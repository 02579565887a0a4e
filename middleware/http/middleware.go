package sluicehttp

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/core"
	"github.com/sluice-go/sluice/middleware/internal/routing"
	"github.com/sluice-go/sluice/middleware/internal/stale"
)

// Option configures Middleware. An option given a nil argument, or given
// twice, makes Middleware return an error.
type Option func(*config)

type config struct {
	core.Config
	routeFunc func(*http.Request) string
	skip      func(*http.Request) bool
	deny      func(http.ResponseWriter, *http.Request, sluice.Decision)
}

// WithRoutes guards requests with the Guard their route maps to in rs, and
// answers their rejections with that Guard's fallbacks; a request whose
// route rs does not list (and has no default for) passes through. It
// excludes WithGuard; Middleware needs one of the two.
func WithRoutes(rs *middleware.Routes) Option {
	return func(c *config) { c.SetRoutes(rs) }
}

// WithGuard guards every request with g: shorthand for WithRoutes with g as
// the only, default, route. It excludes WithRoutes.
func WithGuard(g *sluice.Guard) Option {
	return func(c *config) { c.SetGuard(g) }
}

// WithRouteFunc names a request's route with fn, for routers other than
// http.ServeMux. By default the route is the http.ServeMux pattern: the
// pattern the mux would pick when the middleware wraps the mux itself (even
// when that mux is mounted under an outer one, which has set the request's
// Pattern to its own), else the request's Pattern, set by the mux the
// middleware's handler is registered on. For a route that names no method
// (fn's "/cart", a mux pattern registered without one), a table entry
// naming the request's method ("POST /cart") is picked over "/cart".
func WithRouteFunc(fn func(*http.Request) string) Option {
	return func(c *config) {
		if !c.Once("WithRouteFunc") {
			return
		}
		if fn == nil {
			c.Errorf("WithRouteFunc: nil function")
		}
		c.routeFunc = fn
	}
}

// WithKeyer puts the key k finds for each request in its context
// (sluice.WithKey), with the route as its resource (sluice.WithResource), for
// the keyed policies of the Guard. A request without a key is handled as k
// says: rejected with 400 Bad Request, or put in a shared bucket.
// Default: no key.
func WithKeyer(k *middleware.Keyer) Option {
	return func(c *config) {
		if !c.Once("WithKeyer") {
			return
		}
		if k == nil {
			c.Errorf("WithKeyer: nil Keyer")
		}
		c.Keyer = k
	}
}

// WithRouteResource puts each request's route in its context as its
// resource (sluice.WithResource), for policies that keep state per resource,
// such as a breaker.Group giving each route its own breaker under one Guard.
// It costs the request a new context and a copy of the request (two
// allocations). WithKeyer does it as well. Default: off.
func WithRouteResource() Option {
	return func(c *config) {
		if !c.Once("WithRouteResource") {
			return
		}
		c.Resources = true
	}
}

// WithSkipper lets the requests for which fn reports true bypass the guard
// (health checks, metrics). Default: none bypass it. fn runs first, before
// the route is looked up. To let a route through by its pattern, map the
// pattern to a nil Guard in the route table:
// middleware.RouteTo("GET /healthz", nil).
func WithSkipper(fn func(*http.Request) bool) Option {
	return func(c *config) {
		if !c.Once("WithSkipper") {
			return
		}
		if fn == nil {
			c.Errorf("WithSkipper: nil function")
		}
		c.skip = fn
	}
}

// WithDenyHandler answers rejections that no fallback of the Guard answers
// with fn instead of the default problem response. fn gets the rejecting
// Decision.
func WithDenyHandler(fn func(w http.ResponseWriter, r *http.Request, d sluice.Decision)) Option {
	return func(c *config) {
		if !c.Once("WithDenyHandler") {
			return
		}
		if fn == nil {
			c.Errorf("WithDenyHandler: nil function")
		}
		c.deny = fn
	}
}

// WithClassifier decides from a response's status what it says about the
// handler's health. Default: middleware.ClassifyHTTPStatus (5xx Failure, 4xx
// Ignored).
func WithClassifier(fn func(status int) sluice.Outcome) Option {
	return func(c *config) {
		if !c.Once("WithClassifier") {
			return
		}
		if fn == nil {
			c.Errorf("WithClassifier: nil classifier")
		}
		c.Classify = fn
	}
}

// WithRenderer sets how decisions are rendered: legacy X-RateLimit fields,
// quiet admitted responses, the problem type base. Default: the zero
// middleware.Renderer.
func WithRenderer(r middleware.Renderer) Option {
	return func(c *config) {
		if !c.Once("WithRenderer") {
			return
		}
		c.SetRenderer(r)
	}
}

// Middleware returns net/http middleware that runs each request through the
// Guard of its route. An admitted request gets the RateLimit fields of its
// Decision and runs; its outcome, classified from the final status, is
// reported to the Guard when the handler returns. A rejected request is
// answered by the Guard's fallbacks answering an http.Handler
// (degrade.New[http.Handler], a middleware.StaleCache), else the deny
// handler, else a problem response: 429 or 503 with Retry-After, the
// RateLimit fields and an RFC 9457 body. A handler's failure that a
// fallback of the Guard declares an answer for (degrade.OnError; past the
// Guard's deadline degrade.OnTimeout) is answered by it: a 5xx status is
// held back, and the body written after it dropped, as is a response left
// unwritten by the deadline; the request counts as the failure it was.
// Without such a fallback, a response left unwritten by the deadline is
// answered 504 Gateway Timeout. A request whose client went away counts
// for nothing, and no fallback answers it.
//
// It returns an error for an option given a nil argument or twice, for neither
// WithGuard nor WithRoutes, for both together, for a Guard that declares
// retries (a handler runs once), and for a Guard with a fallback that
// answers no http.Handler.
func Middleware(opts ...Option) (func(http.Handler) http.Handler, error) {
	c := config{Config: core.New("sluicehttp")}
	for i, o := range opts {
		if o == nil {
			c.Errorf("option %d is nil", i)
			continue
		}
		o(&c)
	}
	if err := c.Build(); err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		h := &handler{config: c, next: next}
		h.mux, _ = next.(*http.ServeMux)
		h.needPattern = c.Routes.NeedsPattern() || c.Keyer != nil || c.Resources || c.HasFallbacks()
		return h
	}, nil
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
func (h *handler) route(r *http.Request) (string, *routing.Route) {
	if h.needPattern {
		pattern := h.pattern(r)
		if h.routeFunc == nil && strings.Contains(pattern, " ") {
			return pattern, h.Routes.Match(pattern)
		}
		// A route that carries no method (chi's "/cart", a ServeMux
		// pattern registered without one): a "POST /cart" entry is picked
		// over the "/cart" one, as in Echo, and names the request's route.
		rt := h.Routes.MatchMethod(r.Method, pattern)
		if rt != nil && strings.Contains(rt.Pattern, " ") {
			pattern = rt.Pattern
		}
		return pattern, rt
	}
	return "", h.Routes.Default()
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.skip != nil && h.skip(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	var pattern string
	rt := h.Routes.Default()
	if h.needPattern {
		pattern, rt = h.route(r)
	}
	if rt == nil {
		h.next.ServeHTTP(w, r)
		return
	}
	rw := getWriter(w)
	var key string
	if h.Keyer != nil || h.Resources {
		// The pooled writer carries the request's view, so the key
		// functions see it without an allocation of its own.
		rw.view = request{r: r, pattern: pattern}
		ctx, k, err := h.Context(r.Context(), &rw.view, pattern)
		rw.view = request{}
		if err != nil {
			putWriter(rw)
			markRejected(w)
			h.WriteMissingKey(w, r.Method)
			return
		}
		key = k
		if ctx != r.Context() {
			r = r.WithContext(ctx)
		}
	}
	var call sluice.Call
	err := rt.Guard.Begin(r.Context(), &call)
	if err != nil {
		putWriter(rw)
		h.rejected(w, r, rt, pattern, key, r.RemoteAddr, err, call.Decision(), call.Start(), true)
		return
	}
	h.Render.Admitted(w.Header(), rt, call.Decision())
	if rw.h != h {
		rw.h = h // kept in the pooled writer: a store costs a write barrier
	}
	rw.req = r
	if h.HasFallbacks() {
		if keep := h.GuardOf(rt.Guard); keep != nil {
			if r.Method == http.MethodGet && keep.Stale != nil {
				// Judged as the request came: a middleware inside may drop
				// the credentials it checked.
				if ok, cred := stale.Asked(r); ok {
					rw.cache, rw.Capturing, rw.MaxCapture, rw.credentialed = keep, true, keep.MaxBody, cred
				}
			}
			rw.answer, rw.rt, rw.addr = true, rt, r.RemoteAddr
		}
	}
	if pattern != "" {
		rw.pattern = pattern
	}
	if key != "" {
		rw.key = key
	}
	defer h.finish(rw, &call)
	// rt.Timed first: comparing two contexts costs a runtime call.
	if ctx := call.Context(); rt.Timed && ctx != r.Context() {
		// The Guard's call timeout (sluice.WithTimeout): the handler's
		// context ends at the deadline. What the handler then writes is its
		// answer (a 5xx counts as a failure); nothing written by then is a
		// timeout.
		rw.cctx = ctx
		h.next.ServeHTTP(rw, r.WithContext(ctx))
		rw.returned = true
		return
	}
	h.next.ServeHTTP(rw, r)
	rw.returned = true
}

// finish reports the request's outcome; it runs deferred so that a panic in
// the handler is reported as a Failure (http.ErrAbortHandler, the client
// going away, as Ignored) before it goes on up. It feeds the route's stale
// cache (rw.cache) with a good GET response.
func (h *handler) finish(rw *responseWriter, call *sluice.Call) {
	r := rw.req
	if p := recover(); p != nil {
		if p == http.ErrAbortHandler {
			call.Report(sluice.Ignored, nil)
		} else {
			call.Report(sluice.Failure, nil)
		}
		putWriter(rw)
		panic(p)
	}
	if !rw.returned {
		// The handler's goroutine ends (runtime.Goexit, as t.FailNow
		// does): no answer of its own, a failure, as a panic is.
		call.Report(sluice.Failure, nil)
		putWriter(rw)
		return
	}
	var o sluice.Outcome
	gone := false
	switch {
	case rw.rejected:
		o = sluice.Ignored
	case rw.Hijacked && rw.Status == 0:
		o = sluice.Success
	case r.Context().Err() != nil && errors.Is(r.Context().Err(), context.Canceled):
		// The client went away: whatever the handler wrote (a proxy's 502)
		// says nothing of the dependency, and no fallback answers it.
		o, gone = sluice.Ignored, true
	case rw.Status == 0 && rw.timedOut():
		// Nothing written by the Guard's deadline: the call timed out,
		// whether or not a fallback answers it, and the empty answer is
		// no response to keep.
		o = sluice.Failure
	default:
		o = h.Outcome(call, rw.Status)
	}
	if rw.answer && !rw.rejected && !rw.Hijacked && !gone && (rw.Held || rw.Status == 0 && rw.timedOut() && rw.declared(http.StatusGatewayTimeout)) {
		h.answerFailure(rw, call)
		putWriter(rw)
		return
	}
	if gone && rw.Held {
		// Held for a fallback, for a client that has since gone: the
		// status goes out as it came, without its body.
		routing.DropBodyFields(rw.W.Header())
		rw.W.WriteHeader(rw.Status)
	}
	var err error
	if o == sluice.Failure && !rw.Hijacked && rw.timedOut() {
		// Nothing written by the Guard's deadline, or a failure written
		// past it: the call timed out, for the observers and Stats as
		// for Do.
		code := rw.Status
		if code == 0 {
			code = http.StatusGatewayTimeout
		}
		err = core.FailedStatus(code)
	}
	call.Report(o, err)
	if rw.Status == 0 && !rw.Hijacked && !rw.rejected && !gone && rw.timedOut() {
		core.WriteTimedOut(rw.W)
	}
	// A hijacked connection has no HTTP response to keep, whatever its
	// status says.
	if rw.cache != nil && rw.Capturing && !rw.Hijacked && o == sluice.Success && (rw.Status == http.StatusOK || rw.Status == 0) {
		rw.cache.Keep(r, rw.pattern, rw.key, rw.addr, rw.credentialed, call.Start(), rw.Header(), rw.Capture)
	}
	putWriter(rw)
}

// answerFailure ends call, whose handler failed (rw holds back its 5xx, or
// it wrote nothing by the Guard's deadline), as a failure, and answers it
// with the fallback of the Guard declared for it. The header fields that
// described the handler's dropped body go with it. Should the fallback
// decline, the held status goes out, without the body.
func (h *handler) answerFailure(rw *responseWriter, call *sluice.Call) {
	code := rw.Status
	o := h.Outcome(call, code)
	if code == 0 {
		code, o = http.StatusGatewayTimeout, sluice.Failure
	}
	err := call.Report(o, core.FailedStatus(code))
	rw.Held = false
	// At the instant the fallback was found to answer: one that would no
	// longer (a stale copy grown too old since) must not leave the held
	// status without the body it dropped.
	fb, fr := h.Fallback(rw.req, rw.rt.Guard, rw.pattern, rw.key, rw.addr, rw.at, err, call.Decision())
	// The fields that described the handler's body go with it, whoever
	// answers.
	routing.DropBodyFields(rw.W.Header())
	if fb == nil {
		rw.W.WriteHeader(code)
		return
	}
	// A middleware outside this one counts the fallback's answer as
	// nothing, as it does this one's rejections: this one has counted the
	// failure, and the answer is no response of the handler's to keep.
	markRejected(rw.W)
	fb.ServeHTTP(rw.W, fr)
}

// Reject answers r, in a handler behind Middleware, as the middleware
// answers its own rejections, for a sluice rejection err that a call the
// handler made met: a Transport's breaker open for the dependency, a Guard
// of the handler's own. The fallbacks of the route's Guard answer (the
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
	if rw == nil || rw.req == nil || rw.Status != 0 || rw.Hijacked {
		return false
	}
	// The answer is for the request the middleware admitted, on its route
	// (the handler's r may have been rewritten on its way, by
	// http.StripPrefix say); for a sluice middleware around this one it is
	// a rejection, as this one's own are.
	markRejected(rw.W)
	// The fields the handler set for its own body go with it.
	routing.DropBodyFields(rw.W.Header())
	h, ar := rw.h, rw.req
	pattern, rt := h.route(ar)
	// The key the middleware keyed the request by, which its stale copies
	// are kept under (not an outer middleware's); aged from now, not from
	// the request's arrival.
	h.rejected(rw, ar, rt, pattern, rw.key, rw.addr, err, d, guardhook.Now(rt.Guard), guardhook.RejectedBy(err, rt.Guard))
	return true
}

// rejected answers r, rejected with err and its Decision d; now is an
// instant on the Guard's clock, to tell the age of a stale answer by. own
// tells a rejection by rt's Guard (its own, or one a handler met calling
// it) from one a handler met elsewhere, whose policy's window rt does not
// know (one of the same name there may have another): its RateLimit-Policy
// field has no w.
func (h *handler) rejected(w http.ResponseWriter, r *http.Request, rt *routing.Route, pattern, key, addr string, err error, d sluice.Decision, now time.Duration, own bool) {
	markRejected(w)
	// A client gone hears no answer: no fallback makes one, nor is
	// counted.
	if !errors.Is(r.Context().Err(), context.Canceled) {
		if fb, fr := h.Fallback(r, rt.Guard, pattern, key, addr, now, err, d); fb != nil {
			// The fields set for another body (an outer middleware's
			// defaults, the handler's) do not go with the fallback's.
			routing.DropBodyFields(w.Header())
			fb.ServeHTTP(w, fr)
			return
		}
	}
	if h.deny != nil {
		h.deny(w, r, d)
		return
	}
	h.WriteRejection(w, r.Method, rt, d, own)
}
