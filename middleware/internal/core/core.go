// Package core is what the net/http and Echo middleware share: their
// validated configuration, the route's Guard and its fallbacks, the
// request's key, and the answers to rejections (a fallback's handler, or a
// problem response).
package core

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/fallbackof"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/routing"
	"github.com/sluice-go/sluice/middleware/internal/stale"
)

// Config is an adapter's configuration, set by its options and checked by
// Build.
type Config struct {
	Routes    *routing.Routes
	Keyer     *middleware.Keyer
	Classify  func(status int) sluice.Outcome // nil: middleware.ClassifyHTTPStatus
	Render    routing.Renderer
	Resources bool // put the route in the context as the resource

	pkg       string // the adapter's package name, for errors
	errs      []error
	guardSet  bool
	routesSet bool
	given     map[string]bool          // the options given, by name
	guards    map[*sluice.Guard]*Guard // the Guards with fallbacks
}

// Guard is what a Config knows of a Guard with fallbacks.
type Guard struct {
	// Stale are the stale caches among its fallbacks, fed with the good GET
	// responses of its routes.
	Stale []*stale.Cache
	// MaxBody is the largest body one of them keeps.
	MaxBody int
}

// New returns the default Config of the adapter of package pkg.
func New(pkg string) Config {
	return Config{pkg: pkg}
}

// Errorf records an option's error, which Build returns.
func (c *Config) Errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(c.pkg+": "+format, args...))
}

// Once records that the option name was given, and an error, reporting
// false, when it was already: the second would drop the first in silence.
func (c *Config) Once(name string) bool {
	if c.given[name] {
		c.Errorf("%s given twice: give it once", name)
		return false
	}
	if c.given == nil {
		c.given = make(map[string]bool)
	}
	c.given[name] = true
	return true
}

// SetGuard makes g guard every request.
func (c *Config) SetGuard(g *sluice.Guard) {
	switch {
	case g == nil:
		c.Errorf("WithGuard: nil Guard")
	case c.guardSet || c.routesSet:
		c.Errorf("WithGuard: a Guard or a route table is already given; map routes to Guards in one table (WithRoutes)")
	default:
		c.guardSet = true
		rs, err := routing.NewRoutes(routing.DefaultRoute(g))
		if err != nil {
			c.Errorf("WithGuard: %w", err)
			return
		}
		c.Routes = rs
	}
}

// SetRoutes guards requests with the Guards of rs.
func (c *Config) SetRoutes(rs *middleware.Routes) {
	switch {
	case rs == nil:
		c.Errorf("WithRoutes: nil route table")
	case c.guardSet || c.routesSet:
		c.Errorf("WithRoutes: a Guard or a route table is already given; map routes to Guards in one table")
	default:
		c.routesSet = true
		c.Routes = routing.TableOf(rs)
	}
}

// Build checks the configuration: the options' errors, and the Guards of
// the table: none may declare retries, and each fallback must answer an
// http.Handler.
func (c *Config) Build() error {
	if !c.guardSet && !c.routesSet {
		c.Errorf("no Guard: give WithGuard, or WithRoutes with a route table")
	}
	if err := errors.Join(c.errs...); err != nil {
		return err
	}
	for _, g := range c.Routes.Guards() {
		if _, ok := guardhook.RetryDelay(g, nil, 0, time.Time{}, 0); ok {
			return fmt.Errorf("%s: the Guard of %s declares retries (sluice.WithRetry), which the middleware never makes (it runs a handler once): give the retries to the client's Guard (sluicehttp.Transport, Guard.Do)",
				c.pkg, policyNames(g))
		}
		fbs := guardhook.Fallbacks(g).([]sluice.Fallback)
		if len(fbs) == 0 {
			continue
		}
		info := &Guard{}
		for i, f := range fbs {
			if _, ok := f.(sluice.FallbackOf[http.Handler]); !ok {
				return fmt.Errorf("%s: fallback %d (%T) of the Guard of %s answers no http.Handler: the middleware serves a handler; declare the HTTP answers with degrade.New[http.Handler] (a static answer, a handler) or a middleware.StaleCache",
					c.pkg, i, f, policyNames(g))
			}
			if s, ok := f.(*stale.Cache); ok {
				info.Stale = append(info.Stale, s)
				info.MaxBody = max(info.MaxBody, s.MaxBody())
			}
		}
		if c.guards == nil {
			c.guards = make(map[*sluice.Guard]*Guard)
		}
		c.guards[g] = info
	}
	return nil
}

func policyNames(g *sluice.Guard) string {
	s := ""
	for i, p := range g.Policies() {
		if i > 0 {
			s += ", "
		}
		s += strconv.Quote(p.Name())
	}
	if s == "" {
		return "no policy"
	}
	return "policies " + s
}

// HasFallbacks reports whether any Guard of the table has fallbacks.
func (c *Config) HasFallbacks() bool { return c.guards != nil }

// GuardOf returns what the Config knows of g, nil when g has no fallback.
func (c *Config) GuardOf(g *sluice.Guard) *Guard {
	if c.guards == nil {
		return nil
	}
	return c.guards[g]
}

// Context returns ctx carrying the request's key and its route as its
// resource (WithKeyer), or the route alone (WithRouteResource), and the
// key its stale copies are kept under: "" for a request without a key of
// its own. It returns middleware.ErrMissingKey for a request without a key
// that the Keyer rejects.
func (c *Config) Context(ctx context.Context, q middleware.Request, route string) (context.Context, string, error) {
	if c.Keyer != nil {
		ctx, err := routing.KeyContext(c.Keyer, ctx, q)
		if err != nil {
			return ctx, "", err
		}
		key, _ := sluice.KeyFrom(ctx)
		if key == routing.MissingKey(c.Keyer) {
			// The key every request without one shares: it is no
			// client's, and the stale caches keep such requests' copies
			// by their connection instead (see stale.Cache).
			key = ""
		}
		return ctx, key, nil
	}
	if c.Resources && route != "" {
		return sluice.WithResource(ctx, route), "", nil
	}
	return ctx, "", nil
}

// Fallback returns the handler of g's fallback for err, the rejection with
// Decision d of r (route, key; addr, the connection's address when it was
// admitted, "" for now; now on g's clock), or the failure of its admitted
// call (d then has no Cause), with the request to serve it. It returns a
// nil handler when no fallback serves.
func (c *Config) Fallback(r *http.Request, g *sluice.Guard, route, key, addr string, now time.Duration, err error, d sluice.Decision) (http.Handler, *http.Request) {
	info := c.GuardOf(g)
	if info == nil {
		return nil, nil
	}
	ctx := fallbackContext(info, r, route, key, addr, now)
	h, ferr := fallbackof.Value[http.Handler](ctx, g, err)
	if ferr != nil || h == nil {
		return nil, nil
	}
	return h, r.WithContext(ctx)
}

// Declares reports whether a fallback of g declares an answer for err, the
// error of r's call (route, key, addr; now on g's clock, as for Fallback),
// without running it.
func (c *Config) Declares(r *http.Request, g *sluice.Guard, route, key, addr string, now time.Duration, err error) bool {
	info := c.GuardOf(g)
	if info == nil {
		return false
	}
	ctx := fallbackContext(info, r, route, key, addr, now)
	for _, f := range guardhook.Fallbacks(g).([]sluice.Fallback) {
		if _, ok := f.Declared(ctx, err); ok {
			return true
		}
	}
	return false
}

// fallbackContext returns r's context as the fallbacks of info read it:
// with the route as the resource (degrade.NewRoutes picks the route's
// fallbacks by resource) and, for stale caches, the request.
func fallbackContext(info *Guard, r *http.Request, route, key, addr string, now time.Duration) context.Context {
	ctx := r.Context()
	if _, ok := sluice.ResourceFrom(ctx); !ok && route != "" {
		ctx = sluice.WithResource(ctx, route)
	}
	if info.Stale != nil {
		ctx = stale.WithRequest(ctx, &stale.Request{Route: route, Key: key, Addr: addr, R: r, Now: now})
	}
	return ctx
}

// FailedStatus is the error a handler's failure answer (a 5xx status) is
// to a Guard's fallbacks: it answers with a degrade.OnError rule, or
// OnTimeout once the Guard's deadline has passed.
type FailedStatus int

// TimedOut is the error that a handler's answer code, past the Guard's
// deadline, is to the Guard's fallbacks: a timeout (sluice.ErrTimeout)
// with the FailedStatus.
func TimedOut(code int) error { return fmt.Errorf("%w: %w", sluice.ErrTimeout, FailedStatus(code)) }

func (s FailedStatus) Error() string {
	return "handler answered " + strconv.Itoa(int(s)) + " " + http.StatusText(int(s))
}

// Keep feeds the stale caches of info with the good GET response to r
// (route, key, addr as for Fallback; now on the clock of its Guard);
// credentialed is what stale.Asked told of r as it came.
func (info *Guard) Keep(r *http.Request, route, key, addr string, credentialed bool, now time.Duration, header http.Header, body []byte) {
	q := &stale.Request{Route: route, Key: key, Addr: addr, R: r, Now: now, Credentialed: credentialed}
	for _, s := range info.Stale {
		s.Store(q, header, body)
	}
}

// WriteRejection answers a rejection d on route rt with the problem
// response: 429 or 503, Retry-After, the RateLimit fields, a problem body.
// own tells a rejection by rt's Guard from one by another (see
// routing.Renderer.Rejected).
func (c *Config) WriteRejection(w http.ResponseWriter, method string, rt *routing.Route, d sluice.Decision, own bool) {
	h := w.Header()
	status := c.Render.Rejected(h, rt, d, own)
	p := c.Render.Problem(rt, d)
	h["Content-Length"] = p.Length
	w.WriteHeader(status)
	if method != http.MethodHead {
		_, _ = w.Write(p.Body)
	}
}

// WriteTimedOut answers a request whose handler wrote nothing by the
// Guard's deadline, and that no fallback answers: 504 Gateway Timeout, as
// the call counted, not an empty 200.
func WriteTimedOut(w http.ResponseWriter) {
	h := w.Header()
	routing.DropBodyFields(h)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", "0")
	w.WriteHeader(http.StatusGatewayTimeout)
}

// WriteMissingKey answers a request without a key that the Keyer rejects:
// 400 and a problem body.
func (c *Config) WriteMissingKey(w http.ResponseWriter, method string) {
	h := w.Header()
	h.Set("Content-Type", routing.ProblemContentType)
	h.Set("Cache-Control", "no-store")
	writeProblem(w, method, http.StatusBadRequest, c.Render.AppendMissingKeyProblem(make([]byte, 0, 256)))
}

func writeProblem(w http.ResponseWriter, method string, status int, body []byte) {
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// SetRenderer renders header fields and problem bodies as r says.
func (c *Config) SetRenderer(r middleware.Renderer) { c.Render = routing.Renderer(r) }

// Outcome returns what the status a call of c ended with says: by the
// user's classifier, under Classified, or by middleware.ClassifyHTTPStatus,
// which cannot panic, called as it is.
func (c *Config) Outcome(call *sluice.Call, status int) sluice.Outcome {
	if c.Classify != nil {
		return Classified(call, c.Classify, status)
	}
	return middleware.ClassifyHTTPStatus(status)
}

// Classified returns classify(v), the outcome a classifier of the user's
// gives; should it panic, call ends as a Failure first, so that its slot
// is not lost for good, and the panic goes on. call may be nil.
func Classified[T any](call *sluice.Call, classify func(T) sluice.Outcome, v T) sluice.Outcome {
	done := false
	defer func() {
		if !done && call != nil {
			call.Report(sluice.Failure, nil)
		}
	}()
	o := classify(v)
	done = true
	return o
}
