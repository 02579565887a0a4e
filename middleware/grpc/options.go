package sluicegrpc

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/routing"
)

// Option configures an interceptor or a ServerInHandle. Every option but
// WithMethodGuard and WithTargetGuard (one per method, one per target) is
// given at most once: a second one is an error, never a silent override.
// Options of the other
// side (a per-target guard on a server interceptor, a message guard on a
// client) make a constructor return an error, and so do the options a
// ServerInHandle refuses. The two server interceptors take the same options,
// so that one list serves both: UnaryServerInterceptor ignores
// WithMessageGuard.
type Option func(*options)

type options struct {
	routes     []routing.RoutesOption
	methods    []string
	table      *routing.Routes
	targets    []routing.RoutesOption
	keyer      *middleware.Keyer
	skip       func(middleware.Request) bool
	classify   sluice.Classifier
	quotaMD    bool
	noPushback bool
	msgGuard   *sluice.Guard
	msgMethods []string
	timeout    time.Duration
	maxRetry   time.Duration
	// maxRetrySet: WithMaxRetryDelay was given (0 turns holding off).
	maxRetrySet bool
	critical    []string
	resources   bool
	errs        []error
	serverOnly  []string
	clientOnly  []string
	given       map[string]bool // the options that may be given once
}

// once records that the option name was given, and an error when it was
// given before: an option given twice would leave one of its values
// unused.
func (o *options) once(name string) {
	if o.given[name] {
		o.errs = append(o.errs, fmt.Errorf("sluicegrpc: %s given twice", name))
		return
	}
	if o.given == nil {
		o.given = make(map[string]bool)
	}
	o.given[name] = true
}

// WithGuard makes g guard every method that no WithMethodGuard names (and,
// on a client, that no WithTargetGuard's target matches). Without it, such
// methods pass through unguarded. An interceptor needs a Guard: WithGuard,
// WithMethodGuard, WithRoutes or WithTargetGuard (or, for
// StreamServerInterceptor, WithMessageGuard); without any, its constructor
// returns an error.
func WithGuard(g *sluice.Guard) Option {
	return func(o *options) {
		if g == nil {
			o.errs = append(o.errs, errors.New("sluicegrpc: WithGuard: nil guard"))
			return
		}
		o.routes = append(o.routes, routing.DefaultRoute(g))
	}
}

// WithMethodGuard makes g guard the method fullMethod ("/pkg.Service/Method",
// as grpc.UnaryServerInfo.FullMethod gives it). A method given twice, or a
// nil g, is an error: to let a method through unguarded under a default
// Guard, skip it (WithSkipper).
func WithMethodGuard(fullMethod string, g *sluice.Guard) Option {
	return func(o *options) {
		if err := checkMethod(fullMethod); err != nil {
			o.errs = append(o.errs, fmt.Errorf("sluicegrpc: WithMethodGuard: %w", err))
			return
		}
		if g == nil {
			o.errs = append(o.errs, fmt.Errorf("sluicegrpc: WithMethodGuard: nil guard for %s (to let it through unguarded, skip it with WithSkipper)", fullMethod))
			return
		}
		o.routes = append(o.routes, routing.RouteTo(fullMethod, g))
		o.methods = append(o.methods, fullMethod)
	}
}

// checkMethods checks that each of methods is a full method name, named
// once.
func checkMethods(methods []string) error {
	for i, m := range methods {
		if err := checkMethod(m); err != nil {
			return err
		}
		if slices.Contains(methods[:i], m) {
			return fmt.Errorf("%s named twice", m)
		}
	}
	return nil
}

func checkMethod(m string) error {
	svc, name, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	if !strings.HasPrefix(m, "/") || !ok || svc == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("%q is not a full method name (/package.Service/Method)", m)
	}
	return nil
}

// WithRoutes uses rs, a table built with middleware.NewRoutes whose patterns
// are full method names, instead of WithGuard and WithMethodGuard (which it
// excludes). It lets several adapters share one table. A table with no
// Guard at all is an error.
func WithRoutes(rs *middleware.Routes) Option {
	return func(o *options) {
		o.once("WithRoutes")
		if rs == nil {
			o.errs = append(o.errs, errors.New("sluicegrpc: WithRoutes: nil table"))
			return
		}
		o.table = routing.TableOf(rs)
	}
}

// WithTargetGuard makes g guard the client calls made on a connection whose
// target (grpc.ClientConn.Target, the string given to grpc.NewClient) is
// target, unless a WithMethodGuard names the method. For client interceptors
// only: one interceptor shared by several connections then keeps a breaker
// per dependency. A target given twice, or a nil g, is an error.
func WithTargetGuard(target string, g *sluice.Guard) Option {
	return func(o *options) {
		o.clientOnly = append(o.clientOnly, "WithTargetGuard")
		if target == "" {
			o.errs = append(o.errs, errors.New("sluicegrpc: WithTargetGuard: empty target"))
			return
		}
		if g == nil {
			o.errs = append(o.errs, fmt.Errorf("sluicegrpc: WithTargetGuard: nil guard for %s", target))
			return
		}
		o.targets = append(o.targets, routing.RouteTo(target, g))
	}
}

// WithKeyer finds each call's key for per-key limits with k, a
// middleware.Keyer (which may be shared with other adapters): its KeyFuncs
// see the peer's address as a call's RemoteAddr, its metadata as its headers
// and its full method as its Route. The call's context gets the key
// (sluice.WithKey) and the full method as its resource (sluice.WithResource),
// in one allocation. Without WithKeyer no key is set, and calls cost no
// allocation for it.
func WithKeyer(k *middleware.Keyer) Option {
	return func(o *options) {
		o.once("WithKeyer")
		if k == nil {
			o.errs = append(o.errs, errors.New("sluicegrpc: WithKeyer: nil keyer"))
			return
		}
		o.keyer = k
	}
}

// WithSkipper lets the calls for which s reports true bypass the guard
// (health checks, reflection). The request s sees has the full method as its
// Route, the peer's address as its RemoteAddr and the incoming metadata as
// its headers; middleware.SkipRoutes skips a list of methods. Default: none
// skipped.
func WithSkipper(s func(middleware.Request) bool) Option {
	return func(o *options) {
		o.once("WithSkipper")
		if s == nil {
			o.errs = append(o.errs, errors.New("sluicegrpc: WithSkipper: nil skipper"))
			return
		}
		o.skip = s
	}
}

// WithMethodResource puts each call's full method in its context as its
// resource (sluice.WithResource), for policies that keep state per
// resource, such as a breaker.Group giving each method its own breaker
// under one Guard: the gRPC form of the HTTP adapters' WithRouteResource.
// It costs the call a new context (one small allocation; a client call
// that its Guard rejects gives it back, so rejections cost none).
// WithKeyer does it as well. A skipped call gets no resource. Default: off in
// the server interceptors and the tap; the client interceptors do it for
// every Guard that reads the resource (see the package doc), so that such
// a Guard never sees the resource of the inbound call whose handler makes
// the outgoing one.
func WithMethodResource() Option {
	return func(o *options) {
		o.once("WithMethodResource")
		o.resources = true
	}
}

// WithCriticalMethods marks the calls of methods (health checks, the
// service's core calls) with sluice.PriorityCritical in their context, so
// that a load guard sheds them last. Default: every call has
// sluice.PriorityNormal. A method that no Guard guards (when the
// interceptor can tell: no default Guard, no target Guard, and no route
// for it) is an error, as is a method named twice.
func WithCriticalMethods(methods ...string) Option {
	return func(o *options) {
		o.once("WithCriticalMethods")
		if len(methods) == 0 {
			o.errs = append(o.errs, errors.New("sluicegrpc: WithCriticalMethods: no method"))
			return
		}
		if err := checkMethods(methods); err != nil {
			o.errs = append(o.errs, fmt.Errorf("sluicegrpc: WithCriticalMethods: %w", err))
			return
		}
		o.critical = append(o.critical, methods...)
	}
}

// WithClassifier sets how the error a handler (server) or a call (client)
// returned is turned into an Outcome for breakers and load guards. Default:
// [Classify], by gRPC code. As in a Guard, the classifier is asked only for
// errors: a call that returned nil (OK) is a Success. Whatever the
// classifier, a sluice rejection (one matching sluice.ErrRejected) is
// always Ignored (the guard's own rejections never count as failures), and
// so is, on a server, a call whose client went away (see
// UnaryServerInterceptor). A ServerInHandle refuses it: the interceptors
// classify the calls it admits.
func WithClassifier(c sluice.Classifier) Option {
	return func(o *options) {
		o.once("WithClassifier")
		if c == nil {
			o.errs = append(o.errs, errors.New("sluicegrpc: WithClassifier: nil classifier"))
			return
		}
		o.classify = c
	}
}

// WithQuotaMetadata makes server interceptors send the draft RateLimit and
// RateLimit-Policy fields as response header metadata on admitted calls too,
// for clients that pace themselves; for a call that a ServerInHandle
// admitted with the route's Guard, the fields tell the tap's decision.
// Rejections always carry them when the rejecting policy has a quota; a
// unary handler's rejection with a quota of its own (see the package doc)
// is answered with its quota in place of the admission's, as the HTTP
// adapters answer it, so the admission's is held back until the handler
// sets or sends a header, or returns (or panics). To hold it, the unary
// handler's context carries a grpc.ServerTransportStream of its own in
// place of gRPC's, which grpc.SetHeader, grpc.SendHeader, grpc.SetTrailer
// and grpc.Method use as they use gRPC's, but which the experimental
// grpc.SetSendCompressor and grpc.ClientSupportedCompressors refuse (they
// want gRPC's own stream). Off by default: the metadata costs a few
// allocations per call.
func WithQuotaMetadata() Option {
	return func(o *options) {
		o.serverOnly = append(o.serverOnly, "WithQuotaMetadata")
		o.once("WithQuotaMetadata")
		o.quotaMD = true
	}
}

// WithoutRetryPushback leaves gRPC's retry pushback (the
// grpc-retry-pushback-ms trailer, see [MetadataRetryPushback]) out of
// rejections, for servers whose clients' retryPolicy should retry them with
// its own backoff rather than wait the announced delay. The RetryInfo stays
// in the status. For server interceptors only. Default: the pushback is
// sent.
func WithoutRetryPushback() Option {
	return func(o *options) {
		o.serverOnly = append(o.serverOnly, "WithoutRetryPushback")
		o.once("WithoutRetryPushback")
		o.noPushback = true
	}
}

// WithMessageGuard makes StreamServerInterceptor ask g for every message a
// stream receives, after the stream itself was admitted, on the stream's
// context (with its key). A message g rejects ends the stream with the status
// of its cause, as any rejection (ResourceExhausted for a rate limit):
// RecvMsg returns the rejection, and so does the stream whatever its handler
// returns. With methods, only those streams are
// limited; without, every stream. For server stream interceptors only.
func WithMessageGuard(g *sluice.Guard, methods ...string) Option {
	return func(o *options) {
		o.serverOnly = append(o.serverOnly, "WithMessageGuard")
		if g == nil {
			o.errs = append(o.errs, errors.New("sluicegrpc: WithMessageGuard: nil guard"))
			return
		}
		if err := checkMethods(methods); err != nil {
			o.errs = append(o.errs, fmt.Errorf("sluicegrpc: WithMessageGuard: %w", err))
			return
		}
		o.once("WithMessageGuard")
		o.msgGuard = g
		o.msgMethods = methods
	}
}

// WithTimeout bounds every guarded unary client call to d, unless its
// context already ends sooner. A call that runs out ends with
// DeadlineExceeded, a failure for the guard's breakers. Streams are not
// bounded: they live as long as their context. For client interceptors only.
// Default: no timeout.
func WithTimeout(d time.Duration) Option {
	return clientDuration("WithTimeout", d, func(o *options) {
		o.once("WithTimeout")
		o.timeout = d
	})
}

// WithMaxRetryDelay caps how long a server's RetryInfo may hold a client
// Guard's breakers open (see UnaryClientInterceptor); 0 turns the holding
// off, for a client whose calls carry quotas of their own (a gateway
// forwarding each tenant's credentials, whose ResourceExhausted speaks for
// one tenant alone). Default 10 minutes. For client interceptors only.
func WithMaxRetryDelay(d time.Duration) Option {
	return func(o *options) {
		o.clientOnly = append(o.clientOnly, "WithMaxRetryDelay")
		o.once("WithMaxRetryDelay")
		if d < 0 {
			o.errs = append(o.errs, fmt.Errorf("sluicegrpc: WithMaxRetryDelay: %v is negative", d))
			return
		}
		o.maxRetry, o.maxRetrySet = d, true
	}
}

// clientDuration is a client option named name that sets a positive
// duration d with set.
func clientDuration(name string, d time.Duration, set func(*options)) Option {
	return func(o *options) {
		o.clientOnly = append(o.clientOnly, name)
		if d <= 0 {
			o.errs = append(o.errs, fmt.Errorf("sluicegrpc: %s: %v is not positive", name, d))
			return
		}
		set(o)
	}
}
