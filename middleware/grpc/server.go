package sluicegrpc

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The metadata keys of the IETF draft RateLimit fields, lower case as gRPC
// metadata keys are.
const (
	// MetadataRateLimit carries "name";r=R;t=T: the quota units left and
	// the seconds until the quota is whole again (on a rejection, until a
	// retry may succeed).
	MetadataRateLimit = "ratelimit"
	// MetadataRateLimitPolicy carries "name";q=Q;w=W: the quota and its
	// window in seconds (w left out when unknown).
	MetadataRateLimitPolicy = "ratelimit-policy"
)

// errMissingKey answers a call that carries no key when WithMissingKey
// rejects such calls.
var errMissingKey = status.Error(codes.InvalidArgument, "sluice: the call carries no key to limit it by")

// UnaryServerInterceptor returns an interceptor that guards unary calls with
// their method's Guard (WithMethodGuard, else WithGuard; methods with
// neither pass through). A rejection answers the call, without running the
// handler, with [RejectionStatus] and, when the rejecting policy has a
// quota, the RateLimit header metadata. A sluice rejection that the handler
// returns (one its own call met) is answered the same way, by the method's
// fallback or the rejection's status, whether the interceptor guarded the
// call (which then counts as Ignored) or let it through unguarded. An
// admitted call's outcome is the handler's returned error, classified by
// WithClassifier (default [Classify]); a handler that panics is a Failure,
// and the panic goes on. A call whose client went away before it ended (its
// context cancelled: the client cancelled it, or its connection closed) is
// Ignored whatever the handler returned, as the HTTP adapters ignore a
// request whose client left: a proxy's Unavailable for its cancelled
// upstream call says nothing of the upstream. The Guard's call timeout
// (sluice.WithTimeout) bounds the handler: its context ends at the deadline,
// and an error it then returns ends the call with DeadlineExceeded,
// classified as such (a Failure by default). A call that a ServerInHandle
// admitted is bounded by the tap's Guard's timeout (and by the route's
// Guard's, when it is another).
//
// An admitted call costs no allocation unless the interceptor has to find a
// key (WithKey), consult a skipper, mark a critical method, name the method
// as the call's resource (WithMethodResource) or send quota metadata
// (WithQuotaMetadata).
func UnaryServerInterceptor(opts ...Option) (grpc.UnaryServerInterceptor, error) {
	c, err := build(serverSide, opts)
	if err != nil {
		return nil, err
	}
	return c.unaryServer, nil
}

func (c *config) unaryServer(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if tapsLive.Load() > 0 {
		if a := tapAdmissionFrom(ctx); a != nil {
			if a.claim() {
				return c.unaryTapped(ctx, req, info, handler, a)
			}
			if a.gone() {
				return nil, goneStatus(ctx)
			}
		}
	}
	return c.serveUnary(ctx, req, info, handler)
}

func (c *config) serveUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	rt := c.route(info.FullMethod)
	if rt == nil {
		return c.unguarded(ctx, req, info.FullMethod, handler)
	}
	if c.identifies() {
		var skip bool
		var err error
		ctx, skip, err = c.identify(ctx, info.FullMethod, nil, false)
		if err != nil {
			return nil, err
		}
		if skip {
			return c.unguarded(ctx, req, info.FullMethod, handler)
		}
	}
	var d sluice.Decision
	var done sluice.Done
	dp := &d
	if !c.quotaMD {
		dp = nil // only a rejection's Decision is of use, and the error carries it
	}
	if err := rt.Guard.AdmitTo(ctx, dp, &done); err != nil {
		return c.rejectUnary(ctx, req, info.FullMethod, rt, rejectedDecision(err), err)
	}
	hctx, held := ctx, (*heldQuota)(nil) // the handler's context
	if c.quotaMD {
		hctx, held = holdQuota(ctx, rt, d)
	}
	resp, err := c.runUnary(hctx, rt.Guard, req, handler, &done, held)
	if err != nil {
		return c.handlerError(ctx, req, info.FullMethod, rt, resp, err, held)
	}
	if held != nil {
		held.release(false)
	}
	return resp, nil
}

// unguarded runs the handler of a call the interceptor lets through
// unguarded (a method without a Guard, a skipped call): a rejection the
// handler returns is answered as on a guarded call, as a stream's is.
func (c *config) unguarded(ctx context.Context, req any, method string, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		return c.handlerError(ctx, req, method, nil, resp, err, nil)
	}
	return resp, nil
}

// runUnary runs the handler of a call g admitted (done holds the admission)
// and records its outcome. A handler that panics has held's quota set, as
// any other failed call has.
func (c *config) runUnary(ctx context.Context, g *sluice.Guard, req any, handler grpc.UnaryHandler, done *sluice.Done, held *heldQuota) (resp any, err error) {
	defer func() {
		if done.Active() {
			done.Record(sluice.Failure)
			held.release(false)
		}
	}()
	if g.Timeout() > 0 {
		cctx, finish := g.CallContext(ctx)
		resp, err = handler(cctx, req)
		err = timeoutStatus(finish(err))
	} else {
		resp, err = handler(ctx, req)
	}
	// ctx: without g's timeout, which finish cancelled. The common case, a
	// success under the default classifier, is settled inline.
	if err == nil && c.classify == nil && ctx.Err() == nil {
		done.Record(sluice.Success)
	} else {
		done.Record(c.serverOutcome(ctx, err))
	}
	return resp, err
}

// handlerError is the answer to a call of method on route rt whose handler
// returned resp and err. A sluice rejection the handler returns, one its own
// call met (a client interceptor's breaker open for its dependency), is
// answered as the interceptor answers its own: the method's fallback, or
// the rejection's status, never the error's text. held is the admitted
// call's quota metadata, held back from the header (nil when none is): a
// rejection answered with a quota of its own sends that one instead, as
// the HTTP adapters replace the fields; every other answer sends it.
func (c *config) handlerError(ctx context.Context, req any, method string, rt *middleware.Route, resp any, err error, held *heldQuota) (any, error) {
	r, re := rejectionIn(err)
	held.release(r == nil && re != nil && hasQuota(re.Decision) &&
		c.fallback(method, sluice.CauseOf(re.Decision.Cause)) == nil)
	switch {
	case r != nil:
		// An interceptor's own rejection (a client interceptor's, or one
		// a handler made with Error): its status stands, unless the
		// method has a fallback for it.
		if fb := c.fallback(method, sluice.CauseOf(re.Decision.Cause)); fb != nil {
			return fb(ctx, req, re.Decision)
		}
		return resp, r
	case re != nil:
		return c.rejectUnary(ctx, req, method, rt, re.Decision, re)
	}
	return resp, err
}

// unaryTapped serves a call that a ServerInHandle admitted, whose admission
// a holds: it ends with the call. The tap's Guard's call timeout bounds the
// call as runUnary's does. When this interceptor's route has another Guard
// than the tap's, that Guard decides too, as the inner one.
func (c *config) unaryTapped(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler, a *tapAdmission) (resp any, err error) {
	defer a.failOnPanic()
	cctx := ctx // the handler's: with the tap's Guard's timeout, if it has one
	var finish func(error) error
	if a.guard.Timeout() > 0 {
		cctx, finish = a.guard.CallContext(ctx)
	}
	resp, ran, held, err := c.tappedCall(cctx, req, info, handler, a)
	if !ran {
		// Turned away by this interceptor's Guard: its answer stands.
		if finish != nil {
			_ = finish(nil)
		}
		a.record(sluice.Released)
		return resp, err
	}
	if finish != nil {
		err = timeoutStatus(finish(err))
	}
	a.record(c.serverOutcome(ctx, err)) // ctx: without the timeout, which finish cancelled
	if err != nil {
		// A rejection the handler returned is answered once its outcome
		// (Ignored) is recorded: a fallback's answer is no success.
		return c.handlerError(ctx, req, info.FullMethod, c.route(info.FullMethod), resp, err, held)
	}
	if held != nil {
		held.release(false)
	}
	return resp, err
}

// tappedCall runs the handler of a call that a ServerInHandle admitted (a
// holds its admission), through this interceptor's own Guard when its route
// has another one. ran reports whether the call went on to the handler,
// rather than being turned away (or answered by a fallback) by that Guard.
// With WithQuotaMetadata, a route with the tap's Guard sends the tap's
// quota, held back as serveUnary holds it (held). A rejection the handler
// returns is returned as it is: unaryTapped answers it.
func (c *config) tappedCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler, a *tapAdmission) (resp any, ran bool, held *heldQuota, err error) {
	rt := c.route(info.FullMethod)
	hctx := ctx // the handler's context
	if rt != nil && rt.Guard == a.guard && c.quotaMD {
		hctx, held = holdQuota(ctx, rt, a.d)
	}
	if rt != nil && rt.Guard != a.guard {
		var skip bool
		ctx, skip, err = c.identify(ctx, info.FullMethod, nil, false)
		if err != nil {
			return nil, false, nil, err
		}
		hctx = ctx
		if !skip {
			d, done, err := rt.Guard.Admit(ctx)
			if err != nil {
				resp, err = c.rejectUnary(ctx, req, info.FullMethod, rt, d, err)
				return resp, false, nil, err
			}
			if c.quotaMD {
				hctx, held = holdQuota(ctx, rt, d)
			}
			resp, err = c.runUnary(hctx, rt.Guard, req, handler, &done, held)
			return resp, true, held, err
		}
	}
	if held != nil {
		returned := false
		defer func() {
			if !returned { // the handler panicked
				held.release(false)
			}
		}()
		resp, err = handler(hctx, req)
		returned = true
		return resp, true, held, err
	}
	resp, err = handler(hctx, req)
	return resp, true, held, err
}

// identifies reports whether calls need identify: a skipper, a key, a
// priority or a resource to find.
func (c *config) identifies() bool {
	return c.skip != nil || c.keyer != nil || c.critical != nil || c.resources
}

// identify applies the skipper, the key functions, the priority and the
// resource. md is the tap's header metadata, nil in interceptors; outgoing
// marks a client call, whose headers are its outgoing metadata. It returns
// ctx with the call's key and, when it has one (WithKey, WithKeyer) or
// WithMethodResource asks for it, the method as its resource, as
// middleware.Keyer's Context does; whether the call skips the guard; and
// the error that answers a call without a key when such calls are rejected.
func (c *config) identify(ctx context.Context, method string, md metadata.MD, outgoing bool) (context.Context, bool, error) {
	if !c.identifies() {
		return ctx, false, nil
	}
	if c.critical != nil {
		if _, ok := c.critical[method]; ok {
			ctx = sluice.WithPriority(ctx, sluice.PriorityCritical)
		}
	}
	if c.skip == nil && c.keyer == nil {
		if c.resources {
			ctx = sluice.WithResource(ctx, method)
		}
		return ctx, false, nil
	}
	r := getRequest(ctx, method, md)
	r.outgoing = outgoing
	defer putRequest(r)
	if c.skip != nil && c.skip(r) {
		return ctx, true, nil
	}
	if c.keyer != nil {
		kctx, err := c.keyer.Context(ctx, r)
		if err != nil {
			return ctx, false, errMissingKey
		}
		return kctx, false, nil
	}
	if c.resources {
		ctx = sluice.WithResource(ctx, method)
	}
	return ctx, false, nil
}

// rejectUnary answers a rejected unary call: with its fallback when one is
// set for its method and cause, else with the rejection.
func (c *config) rejectUnary(ctx context.Context, req any, method string, rt *middleware.Route, d sluice.Decision, err error) (any, error) {
	if fb := c.fallback(method, sluice.CauseOf(d.Cause)); fb != nil {
		return fb(ctx, req, d)
	}
	return nil, rejectCall(ctx, rt, d, err, grpc.SetHeader)
}

// rejectCall returns the error that answers a rejection, after setting the
// RateLimit header metadata with set (grpc.SetHeader, a stream's SetHeader)
// when the rejecting policy has a quota.
func rejectCall(ctx context.Context, rt *middleware.Route, d sluice.Decision, err error, set func(context.Context, metadata.MD) error) error {
	if d.Limit >= 0 && d.Policy != "" && set != nil {
		_ = set(ctx, quotaMetadata(rt, d, retryDelay(d)))
	}
	return newRejection(err, d)
}

func setQuota(ctx context.Context, rt *middleware.Route, d sluice.Decision, set func(context.Context, metadata.MD) error) {
	if hasQuota(d) {
		_ = set(ctx, quotaMetadata(rt, d, d.Reset))
	}
}

// hasQuota reports whether d has a quota to describe with the RateLimit
// fields.
func hasQuota(d sluice.Decision) bool { return d.Limit >= 0 && d.Policy != "" }

// heldQuota is the transport stream a unary handler sees when its call was
// admitted with a quota and WithQuotaMetadata: it holds the quota metadata
// back from the header until the handler sets or sends a header of its own,
// or the call ends, so that a rejection the handler returns can be answered
// with its own quota alone, as the HTTP adapters replace the RateLimit
// fields of the admission with the rejection's, rather than with both. Its
// methods are safe on a nil *heldQuota, which holds nothing.
type heldQuota struct {
	grpc.ServerTransportStream
	mu sync.Mutex
	md metadata.MD // nil once set or dropped
}

// holdQuota returns the context for the handler of a call on route rt
// admitted with d, with a heldQuota holding d's quota metadata; without a
// transport stream in ctx (an interceptor called directly), it sets the
// metadata at once, as setQuota does.
func holdQuota(ctx context.Context, rt *middleware.Route, d sluice.Decision) (context.Context, *heldQuota) {
	if !hasQuota(d) {
		return ctx, nil
	}
	inner := grpc.ServerTransportStreamFromContext(ctx)
	if inner == nil {
		setQuota(ctx, rt, d, grpc.SetHeader)
		return ctx, nil
	}
	h := &heldQuota{ServerTransportStream: inner, md: quotaMetadata(rt, d, d.Reset)}
	return grpc.NewContextWithServerTransportStream(ctx, h), h
}

// release sets the held metadata on the stream, or drops it when drop is
// true; once. The metadata is set before release returns, in any goroutine
// that calls it, so that a header sent after it carries the metadata.
func (h *heldQuota) release(drop bool) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.md != nil && !drop {
		_ = h.ServerTransportStream.SetHeader(h.md)
	}
	h.md = nil
}

// SetHeader sets the held metadata, then md.
func (h *heldQuota) SetHeader(md metadata.MD) error {
	h.release(false)
	return h.ServerTransportStream.SetHeader(md)
}

// SendHeader sets the held metadata, then sends the header with md.
func (h *heldQuota) SendHeader(md metadata.MD) error {
	h.release(false)
	return h.ServerTransportStream.SendHeader(md)
}

// rejectedDecision returns the Decision a Guard's rejection carries.
func rejectedDecision(err error) sluice.Decision {
	if rej, ok := err.(*sluice.RejectedError); ok { // as AdmitTo returns it
		return rej.Decision
	}
	var rej *sluice.RejectedError
	if errors.As(err, &rej) {
		return rej.Decision
	}
	return sluice.Decision{Cause: err}
}

// retryDelay is the delay a rejection announces: its RetryAfter, or one
// second when the policy cannot know it, as the HTTP adapters' Retry-After.
func retryDelay(d sluice.Decision) time.Duration {
	if d.RetryAfter > 0 {
		return d.RetryAfter
	}
	return time.Second
}

// quotaMetadata renders d's quota as the draft RateLimit fields.
func quotaMetadata(rt *middleware.Route, d sluice.Decision, reset time.Duration) metadata.MD {
	var buf [128]byte
	pol := string(middleware.AppendRateLimitPolicy(buf[:0], d.Policy, d.Limit, rt.Window(d.Policy)))
	lim := string(middleware.AppendRateLimit(buf[:0], d.Policy, d.Remaining, reset))
	return metadata.MD{MetadataRateLimitPolicy: {pol}, MetadataRateLimit: {lim}}
}

// timeoutStatus turns the error of a call that ran past its Guard's timeout
// (sluice.WithTimeout) into DeadlineExceeded, the code gRPC gives a deadline
// that passed; other errors are returned as they are.
func timeoutStatus(err error) error {
	var te *sluice.TimeoutError
	if errors.As(err, &te) {
		return status.Error(codes.DeadlineExceeded, "sluice: timeout after "+te.After.String())
	}
	return err
}
