package sluiceecho

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
)

// Option configures Middleware. A nil argument to an option leaves its
// default in place.
type Option func(*config)

type config struct {
	routes    *middleware.Routes
	keyer     *middleware.Keyer
	skip      echomw.Skipper
	deny      func(c echo.Context, d sluice.Decision) error
	classify  middleware.StatusClassifier
	render    middleware.Renderer
	resources bool
	fallbacks map[middleware.FallbackKey]FallbackFunc
}

// FallbackFunc answers a rejected request in place of the rejection, given
// the Decision that rejected it; what it returns is returned to Echo.
type FallbackFunc func(c echo.Context, d sluice.Decision) error

// WithRoutes guards requests with the Guard their route maps to in rs: the
// entry of the method and route path ("POST /cart", as net/http patterns
// name a method) when rs lists it, else that of the route path (c.Path():
// "/cart"); a HEAD request without a "HEAD /cart" entry takes the
// "GET /cart" one, as in net/http. Without it (and without WithGuard) every
// request passes through.
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
		if rs, err := middleware.NewRoutes(middleware.DefaultRoute(g)); err == nil {
			c.routes = rs
		}
	}
}

// WithKeyer puts the key k finds for each request in its context
// (sluice.WithKey), with its route as its resource (the route path, or the
// table's entry "POST /cart" that it matched), for the keyed
// policies of the Guard. A request without a key is handled as k's
// MissingKey says: rejected with 400 Bad Request, or put in a shared bucket.
// Default: no key.
func WithKeyer(k *middleware.Keyer) Option {
	return func(c *config) {
		if k != nil {
			c.keyer = k
		}
	}
}

// KeyByValue keys requests by the value an earlier Echo middleware stored
// with c.Set(name, v), as authentication middleware stores the user: a
// non-empty string (of any string type), or the String of a fmt.Stringer
// that is not a nil pointer. Requests without one have no key, and so have
// those of other adapters, which carry no echo.Context. Give it to
// middleware.NewKeyer, for WithKeyer.
func KeyByValue(name string) middleware.KeyFunc {
	return func(r middleware.Request) (string, bool) {
		q, ok := r.(*request)
		if !ok {
			return "", false
		}
		var k string
		switch v := q.c.Get(name).(type) {
		case nil:
		case string:
			k = v
		case fmt.Stringer:
			if rv := reflect.ValueOf(v); rv.Kind() != reflect.Pointer || !rv.IsNil() {
				k = v.String()
			}
		default:
			if rv := reflect.ValueOf(v); rv.Kind() == reflect.String {
				k = rv.String()
			}
		}
		return k, k != ""
	}
}

// WithRouteResource puts each request's route path (or the table's entry
// "POST /cart" that it matched) in its context as its resource
// (sluice.WithResource), for policies that keep state per resource,
// such as a breaker.Group giving each route its own breaker under one Guard.
// It costs the request a new context. WithKeyer does it as well. Default:
// off.
func WithRouteResource() Option {
	return func(c *config) { c.resources = true }
}

// WithSkipper lets the requests for which s reports true bypass the guard.
// Default: echo's DefaultSkipper (none bypass it).
func WithSkipper(s echomw.Skipper) Option {
	return func(c *config) {
		if s != nil {
			c.skip = s
		}
	}
}

// WithDenyHandler answers the rejections that no fallback (WithFallback)
// answers with fn instead of the default problem response; what fn returns
// is returned to Echo.
func WithDenyHandler(fn func(c echo.Context, d sluice.Decision) error) Option {
	return func(c *config) {
		if fn != nil {
			c.deny = fn
		}
	}
}

// WithClassifier decides from the final status what a response says about
// the handler's health. Default: middleware.ClassifyHTTPStatus (5xx Failure,
// 4xx Ignored).
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

// WithRenderer replaces the whole rendering configuration. Default: the zero
// middleware.Renderer.
func WithRenderer(r middleware.Renderer) Option {
	return func(c *config) { c.render = r }
}

// WithFallback answers the requests of route rejected for cause with fn
// instead of a rejection: a cached or reduced answer, a static one. route is
// Echo's route path ("/cart") or a route table entry that names the method
// ("POST /cart"), as WithRoutes matches them; "" stands for every route, and
// cause sluice.CauseNone for every cause. The most specific fallback wins:
// route and cause, route, cause, then neither. A rejection no fallback
// answers goes to the deny handler, else to the problem response.
// RejectionFrom(c) gives fn the Decision as well. Whatever fn answers, the
// Guard's own rejection counts for nothing (it admitted nothing), and one
// the handler's call met counts as Ignored. Default: none.
func WithFallback(route string, cause sluice.Cause, fn FallbackFunc) Option {
	return func(c *config) {
		if fn == nil {
			return
		}
		if c.fallbacks == nil {
			c.fallbacks = make(map[middleware.FallbackKey]FallbackFunc)
		}
		c.fallbacks[middleware.FallbackKey{Route: route, Cause: cause}] = fn
	}
}

// rejectedKey marks, in the echo.Context, a request that a sluice
// middleware rejected, so that an outer one does not count the answer as a
// failure.
const rejectedKey = "sluice.rejected"

// Middleware returns Echo middleware that runs each request through the
// Guard of its route (see WithRoutes: its method and route path, else its
// route path). The Guard's call timeout (sluice.WithTimeout) applies to the
// handler, as in the net/http adapter: the request's context ends at the
// deadline, and what the handler then answers, a status or an error Echo
// renders, is classified as any answer is (a 5xx counts as a failure).
//
// A handler that returns a sluice rejection its own call met (wrapped or
// not; a Guard's timeout wrapping one is a timeout) gets it answered as the
// middleware answers its own, by the route's fallback for its cause
// (WithFallback), the deny handler, or with 429 or 503, Retry-After and a
// problem body, and the request counts as Ignored. So
// does the handler of a request the middleware lets through unguarded
// (skipped, or on a route without a Guard). An *echo.HTTPError keeps its
// code, whatever its Internal, and so does a response already committed.
func Middleware(opts ...Option) echo.MiddlewareFunc {
	cfg := config{skip: echomw.DefaultSkipper, classify: middleware.ClassifyHTTPStatus}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	needPattern := cfg.routes.NeedsPattern()
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cfg.skip(c) {
				return cfg.answered(c, nil, next(c))
			}
			var rt *middleware.Route
			if needPattern {
				rt = cfg.routes.MatchMethod(c.Request().Method, c.Path())
			} else {
				rt = cfg.routes.Default()
			}
			if rt == nil {
				return cfg.answered(c, nil, next(c))
			}
			if cfg.keyer != nil {
				ctx, err := cfg.keyer.Context(c.Request().Context(), &request{c: c, rt: rt})
				if err != nil {
					return cfg.missingKey(c)
				}
				c.SetRequest(c.Request().WithContext(ctx))
			} else if cfg.resources {
				if p := routeOf(c, rt); p != "" {
					c.SetRequest(c.Request().WithContext(sluice.WithResource(c.Request().Context(), p)))
				}
			}
			call, err := rt.Guard.Begin(c.Request().Context())
			if err != nil {
				return cfg.rejected(c, rt, call.Decision())
			}
			cfg.render.Admitted(c.Response().Header(), rt, call.Decision())
			// The request's own context, before the Guard's deadline: its
			// cancellation, and only its, is a client that went away (an
			// inner middleware may put a context of its own in the
			// request and cancel it on return).
			reqCtx := c.Request().Context()
			var req *http.Request
			if ctx := call.Context(); ctx != reqCtx {
				// The handler runs with the Guard's deadline; the request
				// outside it, as the middleware got it: an outer
				// middleware must not take the deadline's context,
				// cancelled once the handler is done, for a client that
				// went away.
				req = c.Request()
				c.SetRequest(req.WithContext(ctx))
				defer c.SetRequest(req)
			}
			defer cfg.failOnPanic(&call)
			err = next(c)
			cerr := err // a *sluice.TimeoutError once the Guard's deadline passed
			if req != nil {
				if err != nil && call.Context().Err() == context.DeadlineExceeded {
					cerr = &sluice.TimeoutError{Err: err}
				}
				// The deadline's context ends with the call: the deny
				// handler and Echo's error handler answer with the
				// request's own.
				c.SetRequest(req)
			}
			if err != nil && !c.Response().Committed && !isHTTPError(err) {
				if d, ok := sluice.RejectionOf(cerr); ok {
					// A rejection the handler's own call met (a breaker
					// open for its dependency): answered as this
					// middleware answers its own, and Ignored.
					call.Report(sluice.Ignored, nil)
					return cfg.rejected(c, rt, d)
				}
			}
			call.Report(cfg.outcome(c, reqCtx, err, cerr), nil)
			return err
		}
	}
}

// answered answers the error err that the handler of a request the
// middleware lets through unguarded returned: a rejection its own call met
// as the middleware answers its own, any other error as it is.
func (cfg *config) answered(c echo.Context, rt *middleware.Route, err error) error {
	if err == nil || c.Response().Committed || isHTTPError(err) {
		return err
	}
	if d, ok := sluice.RejectionOf(err); ok {
		return cfg.rejected(c, rt, d)
	}
	return err
}

// isHTTPError reports whether err is or wraps an *echo.HTTPError: the
// handler chose its status, which stands even when the error's Internal is a
// rejection its call met.
func isHTTPError(err error) bool {
	var he *echo.HTTPError
	return errors.As(err, &he)
}

func (cfg *config) failOnPanic(call *sluice.Call) {
	if p := recover(); p != nil {
		if p == http.ErrAbortHandler {
			call.Report(sluice.Ignored, nil)
		} else {
			call.Report(sluice.Failure, nil)
		}
		panic(p)
	}
}

// outcome classifies how a request ended. A sluice rejection (this guard's
// or a nested one) and a client that went away count for nothing; a
// handler's own context.Canceled, its client still there, counts as the
// status it is answered with. Otherwise
// the status the client gets decides: a handler's error is first handed to
// Echo's error handler, as Echo's own logger does, so a custom handler that
// maps a domain error to a 404 is classified as the 404 the client sees.
//
// reqCtx is the request's context before the Guard's deadline; err is what
// the handler returned, cerr the same as the Guard's deadline makes it (a
// context.Canceled answered after the deadline is the Guard's timeout, a
// Failure, not a client gone).
func (cfg *config) outcome(c echo.Context, reqCtx context.Context, err, cerr error) sluice.Outcome {
	if c.Get(rejectedKey) != nil || errors.Is(reqCtx.Err(), context.Canceled) {
		return sluice.Ignored
	}
	if err != nil {
		if errors.Is(cerr, sluice.ErrRejected) && sluice.DefaultClassifier(cerr) == sluice.Ignored {
			// A nested Guard's rejection (not a timeout wrapping one). A
			// context.Canceled of the handler's own, its client still
			// there, is answered 500 and classified as that 500.
			return sluice.Ignored
		}
		if !c.Response().Committed {
			c.Error(err)
		}
	}
	return cfg.classify(statusOf(c, err))
}

// statusOf returns the status the client gets: the one written when the
// response is committed, else the code of the *echo.HTTPError the handler
// returned, 500 for any other error, and 200 when there was none.
func statusOf(c echo.Context, err error) int {
	res := c.Response()
	if res.Committed {
		return res.Status
	}
	if err == nil {
		return http.StatusOK
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return he.Code
	}
	return http.StatusInternalServerError
}

func (cfg *config) rejected(c echo.Context, rt *middleware.Route, d sluice.Decision) error {
	c.Set(rejectedKey, true)
	if len(cfg.fallbacks) > 0 {
		if fn, ok := middleware.LookupFallback(cfg.fallbacks, routeOf(c, rt), sluice.CauseOf(d.Cause)); ok {
			c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), rejectionKey{}, d)))
			return fn(c, d)
		}
	}
	if cfg.deny != nil {
		c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), rejectionKey{}, d)))
		return cfg.deny(c, d)
	}
	status := cfg.render.Rejected(c.Response().Header(), rt, d)
	return writeProblem(c, status, cfg.render.AppendProblem(make([]byte, 0, 256), d))
}

func (cfg *config) missingKey(c echo.Context) error {
	c.Set(rejectedKey, true)
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, middleware.ProblemContentType)
	h.Set(echo.HeaderCacheControl, "no-store")
	return writeProblem(c, http.StatusBadRequest, cfg.render.AppendMissingKeyProblem(make([]byte, 0, 256)))
}

func writeProblem(c echo.Context, status int, body []byte) error {
	res := c.Response()
	res.Header().Set(echo.HeaderContentLength, strconv.Itoa(len(body)))
	res.WriteHeader(status)
	if c.Request().Method == http.MethodHead {
		return nil
	}
	_, err := res.Write(body)
	return err
}

type rejectionKey struct{}

// RejectionFrom returns the Decision that rejected the request, for
// fallbacks and deny handlers, and false when it was not rejected.
func RejectionFrom(c echo.Context) (sluice.Decision, bool) {
	d, ok := c.Request().Context().Value(rejectionKey{}).(sluice.Decision)
	return d, ok
}

// request shows an echo.Context as a middleware.Request.
type request struct {
	c  echo.Context
	rt *middleware.Route // the route the request matched
}

// routeOf is the route of the request c that matched rt: the table's
// pattern when it names the method ("POST /cart"), else Echo's route path.
func routeOf(c echo.Context, rt *middleware.Route) string {
	if rt != nil && strings.Contains(rt.Pattern, " ") {
		return rt.Pattern
	}
	return c.Path()
}

func (q *request) Context() context.Context    { return q.c.Request().Context() }
func (q *request) Route() string               { return routeOf(q.c, q.rt) }
func (q *request) RemoteAddr() string          { return q.c.Request().RemoteAddr }
func (q *request) Header(name string) []string { return q.c.Request().Header.Values(name) }
func (q *request) Cookie(name string) (string, bool) {
	ck, err := q.c.Cookie(name)
	if err != nil {
		return "", false
	}
	return ck.Value, true
}
