package sluicegrpc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/fallbackof"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/routing"
)

// config is what the constructors build from the options: immutable, shared
// by every call.
type config struct {
	routes     *routing.Routes
	methods    map[string]struct{} // the methods WithMethodGuard names
	targets    *routing.Routes
	keyer      *middleware.Keyer
	skip       func(middleware.Request) bool
	classify   sluice.Classifier
	quotaMD    bool
	msgGuard   *sluice.Guard
	msgRoute   *routing.Route // msgGuard's, for the window of its quota
	msgMethods map[string]struct{}
	timeout    time.Duration
	maxRetry   time.Duration
	fallbacks  map[*sluice.Guard][]sluice.Fallback // the Guards with fallbacks: UnaryServerInterceptor applies them
	critical   map[string]struct{}
	resources  bool
	// askedResources: WithMethodResource was given, and a client
	// interceptor names every call's resource, whatever its Guard reads.
	askedResources bool
	trailers       bool // a server interceptor: rejections set trailer metadata
	pushback       bool // the trailers carry gRPC's retry pushback
	answers        answers
}

type side uint8

const (
	serverSide       side = iota // UnaryServerInterceptor
	streamServerSide             // StreamServerInterceptor
	clientSide
	tapSide
)

// server reports whether s is a server interceptor's side.
func (s side) server() bool { return s == serverSide || s == streamServerSide }

func build(s side, opts []Option) (*config, error) {
	var o options
	for i, fn := range opts {
		if fn == nil {
			o.errs = append(o.errs, fmt.Errorf("sluicegrpc: option %d is nil", i))
			continue
		}
		fn(&o)
	}
	if len(o.errs) > 0 {
		return nil, errors.Join(o.errs...)
	}
	if len(o.routes) == 0 && o.table == nil && len(o.targets) == 0 && (s != streamServerSide || o.msgGuard == nil) {
		return nil, errors.New("sluicegrpc: no Guard: give WithGuard, WithMethodGuard, WithRoutes or WithTargetGuard")
	}
	if s != clientSide && len(o.clientOnly) > 0 {
		return nil, fmt.Errorf("sluicegrpc: %s is for client interceptors only", o.clientOnly[0])
	}
	if s == clientSide && len(o.serverOnly) > 0 {
		return nil, fmt.Errorf("sluicegrpc: %s is for server interceptors only", o.serverOnly[0])
	}
	if s == tapSide && len(o.clientOnly)+len(o.serverOnly) > 0 {
		return nil, fmt.Errorf("sluicegrpc: %s has no meaning for a ServerInHandle", append(o.clientOnly, o.serverOnly...)[0])
	}
	if s == tapSide && o.classify != nil {
		return nil, errors.New("sluicegrpc: WithClassifier has no meaning for a ServerInHandle: the server interceptors classify the calls it admits; give it to them")
	}
	c := &config{skip: o.skip, classify: o.classify, quotaMD: o.quotaMD, msgGuard: o.msgGuard, timeout: o.timeout, maxRetry: o.maxRetry, resources: o.resources}
	c.trailers = s.server()
	c.pushback = !o.noPushback
	if !o.maxRetrySet {
		c.maxRetry = 10 * time.Minute
	}
	if s == clientSide {
		// An outgoing call's resource is its own method, as a Transport's
		// is its host, never the one of the inbound call whose handler
		// makes it: a client-side breaker.Group keys by the dependency.
		// Unless WithMethodResource asks for it, it is set only for a
		// Guard that reads it (see namesResource).
		c.askedResources = o.resources
		c.resources = true
	}
	switch {
	case o.table != nil && len(o.routes) > 0:
		return nil, errors.New("sluicegrpc: WithRoutes excludes WithGuard and WithMethodGuard")
	case o.table != nil:
		if len(o.table.Guards()) == 0 {
			return nil, errors.New("sluicegrpc: WithRoutes: the table has no Guard")
		}
		c.routes = o.table
	default:
		rs, err := routing.NewRoutes(o.routes...)
		if err != nil {
			return nil, fmt.Errorf("sluicegrpc: %w", err)
		}
		c.routes = rs
	}
	if len(o.targets) > 0 {
		if o.table != nil {
			return nil, errors.New("sluicegrpc: WithRoutes excludes WithTargetGuard")
		}
		c.methods = setOf(o.methods)
		rs, err := routing.NewRoutes(o.targets...)
		if err != nil {
			return nil, fmt.Errorf("sluicegrpc: %w", err)
		}
		c.targets = rs
	}
	c.keyer = o.keyer
	if len(o.targets) == 0 {
		// Without target Guards, the table tells which methods are
		// guarded: a critical method that none is has no Guard to be
		// critical to.
		for _, m := range o.critical {
			if c.route(m) == nil {
				return nil, fmt.Errorf("sluicegrpc: WithCriticalMethods: no Guard guards %s", m)
			}
		}
	}
	c.critical = setOf(o.critical)
	if o.msgGuard != nil {
		rs, err := routing.NewRoutes(routing.DefaultRoute(o.msgGuard))
		if err != nil {
			return nil, fmt.Errorf("sluicegrpc: %w", err)
		}
		c.msgRoute = rs.Default()
	}
	c.msgMethods = setOf(o.msgMethods)
	if err := c.checkFallbacks(s); err != nil {
		return nil, err
	}
	if s == tapSide {
		// gRPC runs the handle on the connection's reading goroutine: a
		// policy waiting there stops every stream of the connection,
		// those whose end would free its slot among them.
		for _, g := range c.routes.Guards() {
			if guardhook.Waits(g) {
				return nil, waitingTap(g)
			}
		}
	}
	if s != clientSide {
		for _, g := range append(append(c.routes.Guards(), c.targets.Guards()...), o.msgGuard) {
			if _, ok := guardhook.RetryDelay(g, nil, 0, time.Time{}, 0); ok {
				return nil, errors.New("sluicegrpc: a Guard declares retries (sluice.WithRetry), which a server interceptor never makes (it runs a handler once): give the retries to the client's Guard")
			}
		}
	}
	return c, nil
}

// setOf returns the set of names, nil when there are none.
func setOf(names []string) map[string]struct{} {
	if len(names) == 0 {
		return nil
	}
	set := make(map[string]struct{}, len(names))
	for _, n := range names {
		set[n] = struct{}{}
	}
	return set
}

// route returns the route guarding method, nil when it passes through.
func (c *config) route(method string) *routing.Route {
	r := c.routes.Match(method)
	if r == nil || r.Guard == nil {
		return nil
	}
	return r
}

// clientRoute returns the route guarding a client call: the method's own
// entry, else the target's, else the default.
func (c *config) clientRoute(method, target string) *routing.Route {
	if c.targets == nil {
		return c.route(method)
	}
	if _, ok := c.methods[method]; ok {
		return c.route(method)
	}
	if r := c.targets.Match(target); r != nil {
		return r
	}
	return c.route(method)
}

// checkFallbacks checks that the interceptor of side s can answer with the
// fallbacks of each of its Guards, and keeps those of the Guards that have
// some. Only UnaryServerInterceptor answers with fallbacks, those answering
// a message (a sluice.FallbackOf[any]): the response, or the status error
// it declines with. A Guard with others is an error that says what to
// declare: fallbacks are never skipped in silence.
func (c *config) checkFallbacks(s side) error {
	guards := append(c.routes.Guards(), c.targets.Guards()...)
	if c.msgGuard != nil {
		if fbs := guardhook.Fallbacks(c.msgGuard).([]sluice.Fallback); len(fbs) > 0 {
			return fmt.Errorf("sluicegrpc: WithMessageGuard: the Guard has fallbacks (%T), which cannot answer a message: give it a Guard without fallbacks", fbs[0])
		}
	}
	for _, g := range guards {
		fbs := guardhook.Fallbacks(g).([]sluice.Fallback)
		if len(fbs) == 0 {
			continue
		}
		switch s {
		case streamServerSide:
			return fmt.Errorf("sluicegrpc: StreamServerInterceptor: a Guard has fallbacks (%T), which cannot answer a stream: give the stream interceptor options of its own, with Guards without fallbacks", fbs[0])
		case clientSide:
			return fmt.Errorf("sluicegrpc: a client interceptor cannot answer with a Guard's fallbacks (%T): run the call with sluice.Execute under that Guard, or give the interceptor a Guard without fallbacks", fbs[0])
		case tapSide:
			return fmt.Errorf("sluicegrpc: ServerInHandle cannot answer with a Guard's fallbacks (%T): leave that Guard to UnaryServerInterceptor", fbs[0])
		}
		for i, f := range fbs {
			if _, ok := f.(sluice.FallbackOf[any]); !ok {
				return fmt.Errorf("sluicegrpc: fallback %d (%T) of a Guard answers another type than a gRPC message: declare it answering any, as degrade.New[any] does", i, f)
			}
		}
		if c.fallbacks == nil {
			c.fallbacks = make(map[*sluice.Guard][]sluice.Fallback)
		}
		c.fallbacks[g] = fbs
	}
	return nil
}

// fallback answers err, the error a unary call on route rt ended with, with
// the fallbacks of rt's Guard, as sluice.Execute does: ok reports whether
// one declares an answer for err; resp is its answer, out nil or the
// error it declined with.
func (c *config) fallback(ctx context.Context, rt *routing.Route, err error) (resp any, out error, ok bool) {
	if c.fallbacks == nil || rt == nil {
		return nil, err, false
	}
	fbs := c.fallbacks[rt.Guard]
	for _, f := range fbs {
		if _, ok = f.Declared(ctx, err); ok {
			break
		}
	}
	if !ok {
		return nil, err, false
	}
	resp, out = fallbackof.Value[any](ctx, rt.Guard, err)
	if _, ok := errors.AsType[*fallbackof.NilAnswerError](out); ok {
		// It answered nothing: the call is answered as with no fallback.
		return nil, err, false
	}
	return resp, out, true
}

func (c *config) messageRoute(method string) *routing.Route {
	if c.msgRoute == nil {
		return nil
	}
	if c.msgMethods != nil {
		if _, ok := c.msgMethods[method]; !ok {
			return nil
		}
	}
	return c.msgRoute
}

// waitingTap returns ServerInHandle's refusal of g, a Guard with a policy
// that may wait: it names the Guard and the policy, and how to make one
// that does not.
func waitingTap(g *sluice.Guard) error {
	name := "a policy"
	for _, p := range g.Policies() {
		if p.Needs()&sluice.Waits != 0 {
			name = fmt.Sprintf("policy %q", p.Name())
			break
		}
	}
	return fmt.Errorf("sluicegrpc: ServerInHandle: Guard %q: %s may wait (a queue, a Shaper's turn), and gRPC runs the handle on the connection's reading goroutine, "+
		"where a wait stops every stream of the connection: give it policies that never wait (an adaptive Shedder or bulkhead made with adaptive.WithQueue(0, 0), "+
		"a ratelimit Shaper with a maximum wait of 0), or guard the calls with the server interceptors instead", g.Name(), name)
}
