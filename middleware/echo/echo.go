package sluiceecho

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/timeouterr"
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
	skip echomw.Skipper
	deny func(c echo.Context, d sluice.Decision) error
}

// WithRoutes guards requests with the Guard their route maps to in rs, and
// answers their rejections with that Guard's fallbacks: the entry of the
// method and route path ("POST /cart", as net/http patterns name a method)
// when rs lists it, else that of the route path (c.Path(): "/cart"); a HEAD
// request without a "HEAD /cart" entry takes the "GET /cart" one, as in
// net/http; a request whose route rs does not list passes through. It
// excludes WithGuard; Middleware needs one of the two.
func WithRoutes(rs *middleware.Routes) Option {
	return func(c *config) { c.SetRoutes(rs) }
}

// WithGuard guards every request with g: shorthand for WithRoutes with g as
// the only, default, route. It excludes WithRoutes.
func WithGuard(g *sluice.Guard) Option {
	return func(c *config) { c.SetGuard(g) }
}

// WithKeyer puts the key k finds for each request in its context
// (sluice.WithKey), with its route as its resource (the route path, or the
// table's entry "POST /cart" that it matched), for the keyed
// policies of the Guard. A request without a key is handled as k says:
// rejected with 400 Bad Request, or put in a shared bucket.
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

// KeyByValue keys requests by the value an earlier Echo middleware stored
// with c.Set(name, v), as authentication middleware stores the user: a
// non-empty string (of any string type), or the String of a fmt.Stringer
// that is not a nil pointer. Requests without one have no key, and so have
// those of other adapters, which carry no echo.Context. Give it to
// middleware.NewKeyer, for WithKeyer. An empty name makes a KeyFunc that
// NewKeyer refuses, alone or in middleware.KeyPerRoute.
func KeyByValue(name string) middleware.KeyFunc {
	if name == "" {
		return middleware.KeyByHeader("") // the KeyFunc refused
	}
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
	return func(c *config) {
		if !c.Once("WithRouteResource") {
			return
		}
		c.Resources = true
	}
}

// WithSkipper lets the requests for which s reports true bypass the guard.
// Default: echo's DefaultSkipper (none bypass it).
func WithSkipper(s echomw.Skipper) Option {
	return func(c *config) {
		if !c.Once("WithSkipper") {
			return
		}
		if s == nil {
			c.Errorf("WithSkipper: nil skipper")
		}
		c.skip = s
	}
}

// WithDenyHandler answers the rejections that no fallback of the Guard
// answers with fn instead of the default problem response; what fn returns
// is returned to Echo.
func WithDenyHandler(fn func(c echo.Context, d sluice.Decision) error) Option {
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

// WithClassifier decides from the final status what a response says about
// the handler's health. Default: middleware.ClassifyHTTPStatus (5xx Failure,
// 4xx Ignored).
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

// rejectedKey marks, in the echo.Context, a request that a sluice
// middleware rejected and answered otherwise than with its problem answer
// (a fallback, the deny handler, a missing key), so that an outer one does
// not count the answer as a failure. The problem answer is told by its
// header fields (routing.IsRejection), which cost no allocation, where
// echo.Context.Set costs two (Echo makes its store afresh per request).
const rejectedKey = "sluice.rejected"

// Middleware returns Echo middleware that runs each request through the
// Guard of its route (see WithRoutes: its method and route path, else its
// route path). The Guard's call timeout (sluice.WithTimeout) applies to the
// handler, as in the net/http adapter: the request's context ends at the
// deadline, and what the handler then answers, a status or an error Echo
// renders, is classified as any answer is (a 5xx counts as a failure);
// nothing answered by then is a timeout, answered by the Guard's fallback
// for it (degrade.OnTimeout), else with 504 Gateway Timeout.
//
// A rejected request is answered by the Guard's fallbacks answering an
// http.Handler (degrade.New[http.Handler], a middleware.StaleCache, fed
// with the good GET responses of the Guard's routes), served with
// c.Response() and c.Request(), else the deny handler, else with 429 or
// 503, Retry-After and a problem body. An error the handler returns
// without having answered (not an *echo.HTTPError) that a fallback of the
// Guard is declared for (degrade.OnError) is rendered by Echo's error
// handler first: a 4xx it makes of the error (a domain error mapped to a
// 404) goes out and counts as that 4xx; a 5xx is answered by the fallback,
// and counts as that 5xx. Past the Guard's deadline such an error is a
// timeout to the fallbacks (degrade.OnTimeout). So is a 5xx the handler
// writes (through c.Response() or its
// Writer), held back with the body written after it, as in the net/http
// adapter. An error a fallback answered returns nil to the middleware
// outside: the answer is the fallback's; the Guard's observers hear the
// error. A handler that returns a sluice
// rejection its own call met (wrapped or not; a Guard's timeout wrapping
// one is a timeout) gets it answered the same way, and the request counts
// as Ignored. So does the handler of a request the middleware lets through
// unguarded (skipped, or on a route without a Guard). An *echo.HTTPError
// keeps its code, whatever its Internal, and so does a response already
// committed.
//
// It returns an error for an option given a nil argument or twice, for neither
// WithGuard nor WithRoutes, for both together, for a Guard that declares
// retries (a handler runs once), and for a Guard with a fallback that
// answers no http.Handler.
func Middleware(opts ...Option) (echo.MiddlewareFunc, error) {
	cfg := config{Config: core.New("sluiceecho"), skip: echomw.DefaultSkipper}
	for i, o := range opts {
		if o == nil {
			cfg.Errorf("option %d is nil", i)
			continue
		}
		o(&cfg)
	}
	if err := cfg.Build(); err != nil {
		return nil, err
	}
	needPattern := cfg.Routes.NeedsPattern()
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cfg.skip(c) {
				return cfg.answered(c, nil, next(c))
			}
			var rt *routing.Route
			if needPattern {
				rt = cfg.Routes.MatchMethod(c.Request().Method, c.Path())
			} else {
				rt = cfg.Routes.Default()
			}
			if rt == nil {
				return cfg.answered(c, nil, next(c))
			}
			var key string
			if cfg.Keyer != nil || cfg.Resources {
				ctx, k, err := cfg.Context(c.Request().Context(), &request{c: c, rt: rt}, routeOf(c, rt))
				if err != nil {
					c.Set(rejectedKey, true)
					cfg.WriteMissingKey(c.Response(), c.Request().Method)
					return nil
				}
				key = k
				if ctx != c.Request().Context() {
					c.SetRequest(c.Request().WithContext(ctx))
				}
			}
			var call sluice.Call
			err := rt.Guard.Begin(c.Request().Context(), &call)
			if err != nil {
				return cfg.rejected(c, rt, key, "", err, call.Decision(), call.Start(), true, errors.Is(c.Request().Context().Err(), context.Canceled))
			}
			cfg.Render.Admitted(c.Response().Header(), rt, call.Decision())
			return cfg.serve(c, next, rt, key, &call)
		}
	}, nil
}

// serve runs the handler of a request call admitted on route rt, with the
// request's key, and ends the call. Its defers are open-coded only in a
// function of few returns: Middleware's closure has too many.
func (cfg *config) serve(c echo.Context, next echo.HandlerFunc, rt *routing.Route, key string, call *sluice.Call) error {
	res := c.Response()
	asked := c.Request() // the request as it came: its copy is kept, its rejections answered
	// The request's own context, before the Guard's deadline: its
	// cancellation, and only its, is a client that went away (an inner
	// middleware may put a context of its own in the request and cancel it
	// on return).
	reqCtx := asked.Context()
	// The connection's address as the request came, which a middleware
	// inside may rewrite: a keyless client's stale copies are kept under it.
	addr := asked.RemoteAddr
	w := getWriter(res.Writer)
	res.Writer = w
	defer restore(res, w)
	var keep *core.Guard
	if cfg.HasFallbacks() {
		if keep = cfg.GuardOf(rt.Guard); keep != nil {
			w.answer, w.cfg, w.c, w.rt, w.asked, w.reqCtx, w.key, w.addr = true, cfg, c, rt, asked, reqCtx, key, addr
			if asked.Method == http.MethodGet && keep.Stale != nil {
				// Judged as the request came: a middleware inside may drop
				// the credentials it checked.
				if ok, cred := stale.Asked(asked); ok {
					w.Capturing, w.MaxCapture, w.credentialed = true, keep.MaxBody, cred
				}
			}
		}
	}
	var req *http.Request
	if ctx := call.Context(); rt.Timed && ctx != reqCtx { // rt.Timed first: a context compare is a runtime call
		// The handler runs with the Guard's deadline; the request outside
		// it, as the middleware got it: an outer middleware must not take
		// the deadline's context, cancelled once the handler is done, for a
		// client that went away.
		req = asked
		w.cctx = ctx
		c.SetRequest(req.WithContext(ctx))
		defer c.SetRequest(req)
	}
	returned := false
	defer failOnPanic(call, w, &returned)
	err := next(c)
	returned = true
	cerr := err // a *timeouterr.Error once the Guard's deadline passed
	if req != nil {
		if err != nil && call.Context().Err() == context.DeadlineExceeded {
			cerr = &timeouterr.Error{Err: err}
		}
		// The deadline's context ends with the call: the deny handler and
		// Echo's error handler answer with the request's own.
		c.SetRequest(req)
	}
	w.tell(res)
	if w.Held {
		return cfg.answerHeld(c, w, call, err)
	}
	if err != nil && keep != nil && !res.Committed && reqCtx.Err() == nil && !isHTTPError(err) {
		if _, rejected := sluice.RejectionOf(cerr); !rejected &&
			cfg.Declares(asked, rt.Guard, routeOf(c, rt), key, addr, guardhook.Now(rt.Guard), cerr) {
			// A failure a fallback of the Guard answers (past the Guard's
			// deadline, a timeout): the application's error handler
			// renders it first, as it would without the fallback. A 4xx it
			// makes of it (a domain error mapped to a 404) goes out, and
			// counts as that 4xx; a 5xx is held, and answered by the
			// fallback for the error itself.
			w.failed = cerr
			c.Error(err)
			w.tell(res)
			if w.Held {
				return cfg.answerHeld(c, w, call, err)
			}
		}
	}
	// What is written from here on is the middleware's answer: no 5xx of
	// it is held back.
	w.answer = false
	if err != nil && !res.Committed && !isHTTPError(err) {
		if d, ok := sluice.RejectionOf(cerr); ok {
			// A rejection the handler's own call met (a breaker open for
			// its dependency): answered as this middleware answers its own,
			// and Ignored.
			call.Report(sluice.Ignored, nil)
			// For the request as it came, not as an inner middleware
			// rewrote it: its fallbacks (a stale copy of its URI) answer.
			// The fields the handler set for its own body do not go with
			// the answer, as sluicehttp.Reject drops them.
			c.SetRequest(asked)
			routing.DropBodyFields(res.Header())
			return cfg.rejected(c, rt, key, addr, cerr, d, guardhook.Now(rt.Guard), guardhook.RejectedBy(cerr, rt.Guard), errors.Is(reqCtx.Err(), context.Canceled)) // a stale copy is aged from now
		}
		if reqCtx.Err() == nil && keep != nil &&
			cfg.Declares(asked, rt.Guard, routeOf(c, rt), key, addr, guardhook.Now(rt.Guard), cerr) {
			// A failure, or the Guard's timeout, that a fallback of the
			// Guard answers: counted as the 500 it would have been, and
			// answered by the fallback, for the request as it came (its
			// stale copy was kept under it).
			ferr := call.Report(cfg.Outcome(call, http.StatusInternalServerError), err)
			if fb, fr := cfg.Fallback(asked, rt.Guard, routeOf(c, rt), key, addr, guardhook.Now(rt.Guard), ferr, call.Decision()); fb != nil {
				// An outer middleware counts the fallback's answer as
				// nothing, as it does this one's rejections.
				c.Set(rejectedKey, true)
				routing.DropBodyFields(res.Header())
				c.SetRequest(fr)
				fb.ServeHTTP(res, fr)
				return nil
			}
			return err
		}
	}
	o := cfg.outcome(reqCtx, c, call, err, cerr)
	empty := false // nothing written by the Guard's deadline
	if o == sluice.Success && err == nil && req != nil && !res.Committed && !w.Hijacked &&
		call.Context().Err() == context.DeadlineExceeded && reqCtx.Err() == nil {
		// Nothing written by the Guard's deadline: the call timed out, and
		// its empty answer is no response to keep.
		o, empty = sluice.Failure, true
	}
	var rerr error
	if o == sluice.Failure && req != nil && call.Context().Err() == context.DeadlineExceeded && reqCtx.Err() == nil {
		// Past the Guard's deadline: the call timed out, for the observers
		// and Stats as for Do (Report maps the error).
		if rerr = err; rerr == nil {
			rerr = core.FailedStatus(http.StatusGatewayTimeout)
		}
	}
	reported := call.Report(o, rerr)
	if empty && keep != nil {
		// Answered as the net/http adapter answers it: by the Guard's
		// fallback for a timeout, if it has one.
		if fb, fr := cfg.Fallback(asked, rt.Guard, routeOf(c, rt), key, addr, guardhook.Now(rt.Guard), reported, call.Decision()); fb != nil {
			routing.DropBodyFields(res.Header())
			c.Set(rejectedKey, true)
			c.SetRequest(fr)
			fb.ServeHTTP(res, fr)
			return nil
		}
	}
	if empty {
		core.WriteTimedOut(res)
		return nil
	}
	// A hijacked connection has no HTTP response to keep.
	// Nor has an answer the handler failed to finish (an error after its
	// 200 went out: the body cut short). The copy is kept under the
	// request as it came, which lookups see, not as an inner middleware
	// rewrote it (http.StripPrefix).
	if w.Capturing && err == nil && !w.Hijacked && o == sluice.Success && (res.Status == http.StatusOK || !res.Committed) {
		keep.Keep(asked, routeOf(c, rt), key, addr, w.credentialed, call.Start(), res.Header(), w.Capture)
	}
	return err
}

// restore puts back the writer that w was put over in res, and returns w
// to the pool.
func restore(res *echo.Response, w *writer) {
	res.Writer = w.W
	putWriter(w)
}

// answerHeld ends call, whose handler answered with the 5xx that w holds
// back for a fallback of the Guard, as a failure, and answers the request
// with that fallback; should it decline, the held status goes out without
// the body. The header fields that described the handler's dropped body go
// with it, whoever answers. err is what the handler returned.
func (cfg *config) answerHeld(c echo.Context, w *writer, call *sluice.Call, err error) error {
	code := w.Status
	w.answer = false
	res := c.Response()
	routing.DropBodyFields(res.Header())
	if errors.Is(w.reqCtx.Err(), context.Canceled) {
		// Held for a client that has since gone: it hears no fallback,
		// and the answer counts for nothing.
		call.Report(sluice.Ignored, nil)
		w.Held = false
		w.W.WriteHeader(code)
		res.Size = 0
		return err
	}
	failed := error(core.FailedStatus(code))
	if w.failed != nil {
		failed = w.failed // the handler's error, rendered by Echo's error handler
	}
	ferr := call.Report(cfg.Outcome(call, code), failed)
	// At the instant the fallback was found to answer: one that would no
	// longer (a stale copy grown too old since) must not leave the held
	// status without the body it dropped.
	fb, fr := cfg.Fallback(w.asked, w.rt.Guard, routeOf(c, w.rt), w.key, w.addr, w.at, ferr, call.Decision())
	// Held until here: should the classifier or a fallback's lookup panic,
	// failOnPanic sends the status.
	w.Held = false
	if fb == nil {
		w.W.WriteHeader(code)
		res.Size = 0
		return err
	}
	// An outer middleware counts the fallback's answer as nothing, as it
	// does this one's rejections. Echo's Response took the held status as
	// written: the fallback writes past it, and the Response then tells
	// what the client got.
	c.Set(rejectedKey, true)
	c.SetRequest(fr)
	w.Status, w.Size = 0, 0
	fb.ServeHTTP(w, fr)
	res.Status, res.Size = w.Status, w.Size
	if res.Status == 0 {
		res.Status = http.StatusOK
	}
	return nil
}

// answered answers the error err that the handler of a request the
// middleware lets through unguarded returned: a rejection its own call met
// as the middleware answers its own, any other error as it is.
func (cfg *config) answered(c echo.Context, rt *routing.Route, err error) error {
	if err == nil || c.Response().Committed || isHTTPError(err) {
		return err
	}
	if d, ok := sluice.RejectionOf(err); ok {
		routing.DropBodyFields(c.Response().Header())
		return cfg.rejected(c, rt, "", "", err, d, 0, false, false)
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

// failOnPanic ends call, whose handler panicked or ended its goroutine
// (runtime.Goexit: returned is unset), as a failure (a panic of
// http.ErrAbortHandler, the client gone, as Ignored). A 5xx that w held
// back for a fallback goes out, without its body: Echo's Response took it
// as written, and no one else would write it.
func failOnPanic(call *sluice.Call, w *writer, returned *bool) {
	if p := recover(); p != nil {
		if p == http.ErrAbortHandler {
			call.Report(sluice.Ignored, nil)
		} else {
			call.Report(sluice.Failure, nil)
		}
		sendHeld(w)
		panic(p)
	}
	if !*returned {
		call.Report(sluice.Failure, nil)
		sendHeld(w)
	}
}

// sendHeld sends the status w holds back, if any, without its body.
func sendHeld(w *writer) {
	if w.Held {
		w.Held = false
		routing.DropBodyFields(w.Header())
		w.W.WriteHeader(w.Status)
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
func (cfg *config) outcome(reqCtx context.Context, c echo.Context, call *sluice.Call, err, cerr error) sluice.Outcome {
	// A problem answer is a 429 or a 503: the header is read only then.
	res := c.Response()
	if st := res.Status; (st == http.StatusTooManyRequests || st == http.StatusServiceUnavailable) && routing.IsRejection(res.Header()) ||
		c.Get(rejectedKey) != nil || errors.Is(reqCtx.Err(), context.Canceled) {
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
	return cfg.Outcome(call, statusOf(c, err))
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

// rejected answers the request of c on route rt (nil: unguarded), rejected
// with err and its Decision d; addr is the connection's address as the
// request came ("" for the request's own), and now an instant on the
// Guard's clock. own tells a rejection by rt's Guard (its own, or one the
// handler met calling it) from one the handler met elsewhere, whose
// policy's window rt does not know: its RateLimit-Policy field has no w.
func (cfg *config) rejected(c echo.Context, rt *routing.Route, key, addr string, err error, d sluice.Decision, now time.Duration, own, gone bool) error {
	// A client gone (the request's own context canceled: gone) hears no
	// answer: no fallback makes one, nor is counted.
	if rt != nil && !gone {
		if fb, fr := cfg.Fallback(c.Request(), rt.Guard, routeOf(c, rt), key, addr, now, err, d); fb != nil {
			c.Set(rejectedKey, true)
			// The fields the handler set for its own body go with it.
			routing.DropBodyFields(c.Response().Header())
			c.SetRequest(fr)
			fb.ServeHTTP(c.Response(), fr)
			return nil
		}
	}
	if cfg.deny != nil {
		c.Set(rejectedKey, true)
		return cfg.deny(c, d)
	}
	cfg.WriteRejection(c.Response(), c.Request().Method, rt, d, own)
	return nil
}

// request shows an echo.Context as a middleware.Request.
type request struct {
	c  echo.Context
	rt *routing.Route // the route the request matched
}

// routeOf is the route of the request c that matched rt: the table's
// pattern when it names the method ("POST /cart"), else Echo's route path.
func routeOf(c echo.Context, rt *routing.Route) string {
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
