package sluicegrpc

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/timeouterr"
	"github.com/sluice-go/sluice/middleware/internal/routing"
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

// errMissingKey answers a call that carries no key when the Keyer
// rejects such calls (middleware.RejectMissingKey).
var errMissingKey = status.Error(codes.InvalidArgument, "sluice: the call carries no key to limit it by")

// UnaryServerInterceptor returns an interceptor that guards unary calls with
// their method's Guard (WithMethodGuard, else WithGuard; methods with
// neither pass through). A rejection answers the call, without running the
// handler, with the rejection status (see the package doc) and trailer metadata only (see
// [MetadataRetryPushback]): the retry pushback of its delay and, when the
// rejecting policy has a quota, the RateLimit fields; unless a fallback of
// the method's Guard (sluice.WithFallback) answers it, as it answers a
// timeout or a failure it declares (see the package doc). A sluice
// rejection that the handler returns (one its own call met) is answered the
// same way, by that fallback or the rejection's status, whether the
// interceptor guarded the
// call (which then counts as Ignored) or let it through unguarded. An
// admitted call's outcome is the handler's returned error, classified by
// WithClassifier (default [Classify]); a handler that panics is a Failure,
// and the panic goes on. A call whose client went away before it ended (its
// context cancelled: the client cancelled it, or its connection closed) is
// Ignored whatever the handler returned, as the HTTP adapters ignore a
// request whose client left: a proxy's Unavailable for its cancelled
// upstream call says nothing of the upstream. The Guard's call timeout
// (sluice.WithTimeout) bounds the handler: its context ends at the deadline,
// and an error it then returns that classifies as a failure ends the call
// with DeadlineExceeded, classified as such (a Failure by default); another
// (a NotFound) goes out as it is, classified as itself. A call that a ServerInHandle
// admitted is bounded by the tap's Guard's timeout (and by the route's
// Guard's, when it is another).
//
// An admitted call costs no allocation unless the interceptor has to find a
// key (WithKeyer), consult a skipper, mark a critical method, name the method
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
	var call sluice.Call
	err := rt.Guard.Begin(ctx, &call)
	if err != nil {
		return c.rejectUnary(ctx, rt, call.Decision(), err)
	}
	// The handler's context: with the Guard's deadline (sluice.WithTimeout),
	// when it has one, and the held quota metadata.
	hctx, held := call.Context(), (*heldQuota)(nil)
	if c.quotaMD {
		hctx, held = holdQuota(hctx, rt, call.Decision(), nil)
	}
	// A fallback that panics, as a handler or a classifier, lets the held
	// fields go (release does nothing once they are settled).
	defer held.release(false)
	resp, err := c.runUnary(ctx, hctx, &call, req, handler, held)
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

// runUnary runs the handler of a call that call admitted, with hctx (ctx,
// the interceptor's, with the call's deadline and held quota), and ends the
// call with its outcome. A handler that panics, or a classifier, has held's
// quota set, as any other failed call has.
func (c *config) runUnary(ctx, hctx context.Context, call *sluice.Call, req any, handler grpc.UnaryHandler, held *heldQuota) (resp any, err error) {
	ended := false
	defer func() {
		if !ended { // the handler or the classifier panicked
			call.Report(sluice.Failure, nil)
			held.release(false)
		}
	}()
	resp, err = handler(hctx, req)
	// ctx: without the Guard's deadline. The common case, a success under
	// the default classifier, is settled inline.
	if err == nil && c.classify == nil && ctx.Err() == nil {
		call.Report(sluice.Success, nil)
		ended = true
		return resp, nil
	}
	err = c.endServed(ctx, call, err)
	ended = true
	return resp, err
}

// endServed ends call, a call this server served whose context, as gRPC
// gave it to the interceptor, is ctx, with err, the handler's error: past
// the call's deadline (the Guard's sluice.WithTimeout), an err that
// classifies as a failure is classified as DeadlineExceeded and returned
// as the Guard's *timeouterr.Error, for the fallbacks to see;
// handlerError answers it with DeadlineExceeded. Another (a NotFound) goes
// out as it is.
func (c *config) endServed(ctx context.Context, call *sluice.Call, err error) error {
	o := c.serverOutcome(ctx, call, err)
	if timeoutOf(o, err) && timedOut(call, ctx, err) {
		return ownTimeout(call.Report(c.serverOutcome(ctx, call, errTimeoutStatus), pastDeadline{err}))
	}
	call.Report(o, nil)
	return err
}

// callTimeout is the error of a call that ran past its own Guard's deadline
// (sluice.WithTimeout), as the Guard's call reported it: the fallbacks see
// it as the Guard's *timeouterr.Error, and, when none answers, it is
// answered with DeadlineExceeded. A timeout the handler returns (of a Guard
// of its own) is no callTimeout, and goes out as it is.
type callTimeout struct{ te *timeouterr.Error }

// Error is the Guard's timeout's text.
func (e callTimeout) Error() string { return e.te.Error() }

// Timeout reports true, as the Guard's timeout does.
func (e callTimeout) Timeout() bool { return true }

// Unwrap returns the Guard's timeout, for errors.Is and errors.As.
func (e callTimeout) Unwrap() error { return e.te }

// ownTimeout marks err, a call's timeout as its Guard reported it, as a
// callTimeout.
func ownTimeout(err error) error {
	if te, ok := err.(*timeouterr.Error); ok {
		return callTimeout{te}
	}
	return err
}

// pastDeadline is an error past the Guard's deadline that an interceptor
// takes for the timeout (see timeoutOf): it matches
// context.DeadlineExceeded, so that Call.Report maps it to the Guard's
// timeout whatever outcome it is reported with (that of the timeout's
// status, which a Classifier may ignore).
type pastDeadline struct{ error }

// Is reports that the error is a deadline's.
func (pastDeadline) Is(target error) bool { return target == context.DeadlineExceeded }

// Unwrap returns the handler's or the server's error.
func (e pastDeadline) Unwrap() error { return e.error }

// timeoutOf reports whether an error err of outcome o, past the Guard's
// deadline, is its timeout: a failure, a rejection (an inner Guard's wait
// that the deadline cut) or a context's end, as a Guard's Do has it;
// another (a NotFound) is not.
func timeoutOf(o sluice.Outcome, err error) bool {
	return o == sluice.Failure || errors.Is(err, sluice.ErrRejected) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		status.Code(err) == codes.Canceled || status.Code(err) == codes.DeadlineExceeded
}

// errTimeoutStatus is the status a call past its Guard's deadline is
// classified by: the DeadlineExceeded that timeoutStatus answers it with.
var errTimeoutStatus = status.Error(codes.DeadlineExceeded, "sluice: timeout")

// timedOut reports whether call, begun with ctx, which returned err, ran
// past its Guard's deadline, as call.Report maps it to a
// *timeouterr.Error: the Guard gave the call a deadline of its own, which
// has passed, and err is not nil.
func timedOut(call *sluice.Call, ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	cctx := call.Context()
	return cctx != ctx && cctx.Err() == context.DeadlineExceeded
}

// handlerError is the answer to a call of method on route rt whose handler
// returned resp and err. A sluice rejection the handler returns, one its own
// call met (a client interceptor's breaker open for its dependency), is
// answered as the interceptor answers its own: the fallback of rt's Guard, or
// the rejection's status, never the error's text. held is the admitted
// call's quota metadata, held back from the header (nil when none is): a
// rejection answered with a quota of its own sends that one instead, as
// the HTTP adapters replace the fields; every other answer sends it.
func (c *config) handlerError(ctx context.Context, req any, method string, rt *routing.Route, resp any, err error, held *heldQuota) (any, error) {
	r, d, re := rejectionIn(err)
	var fresp any
	var fout error
	served := false
	if !errors.Is(ctx.Err(), context.Canceled) {
		// A client gone hears no answer: no fallback makes one (nor is
		// counted), as in the HTTP adapters.
		fresp, fout, served = c.fallback(ctx, rt, err)
	}
	if served {
		// A fallback that declined (returned the rejection, or another)
		// is answered as no fallback, with the rejection's status.
		r, d, re = rejectionIn(fout)
	}
	answered := r != nil && !r.client // by a server interceptor within: its trailers are set
	held.settle(answered || re != nil, hasQuota(d))
	switch {
	case answered:
		return resp, r
	case re != nil:
		// A rejection by another Guard than rt's names no window: rt's
		// would name another policy's of the same name.
		if rt != nil && !guardhook.RejectedBy(re, rt.Guard) {
			rt = nil
		}
		return c.answerUnary(ctx, rt, d, re)
	case served:
		if t, ok := fout.(callTimeout); ok {
			// A fallback that declined the call's timeout, returning it,
			// leaves it the timeout it was.
			return fresp, timeoutStatus(t.te)
		}
		return fresp, fout
	}
	if t, ok := err.(callTimeout); ok {
		return resp, timeoutStatus(t.te)
	}
	return resp, err
}

// unaryTapped serves a call that a ServerInHandle admitted, whose admission
// a holds: it ends with the call. The tap's Guard's call timeout bounds the
// call as runUnary's does. When this interceptor's route has another Guard
// than the tap's, that Guard decides too, as the inner one.
func (c *config) unaryTapped(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler, a *tapAdmission) (resp any, err error) {
	defer a.failOnPanic()
	cctx, cancel := a.callContext(ctx) // the handler's: with the tap's Guard's deadline, if it has one
	if cancel != nil {
		defer cancel()
	}
	resp, ran, held, err := c.tappedCall(cctx, req, info, handler, a)
	if !ran {
		// Turned away by this interceptor's Guard: its answer stands.
		a.record(sluice.Released)
		return resp, err
	}
	// A classifier or a fallback that panics lets the held fields go
	// (release does nothing once they are settled).
	defer held.release(false)
	err = c.endTapped(ctx, cctx, a, err)
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

// endTapped ends the admission a of a call whose handler ran with cctx
// (ctx, the interceptor's, with the tap's Guard's deadline; see
// callContext) and returned err, as endServed ends a call the interceptor
// admitted: past the deadline, err is answered with DeadlineExceeded.
func (c *config) endTapped(ctx, cctx context.Context, a *tapAdmission, err error) error {
	if err != nil && cctx != ctx && context.Cause(cctx) == sluice.ErrTimeout {
		// cctx ended at the deadline of the admission's own context, which
		// ends at the same instant: wait for it, so that the admission
		// tells the timeout as the Guard has it.
		<-a.call.Context().Done()
	}
	o := c.serverOutcome(ctx, &a.call, err)
	if timeoutOf(o, err) && err != nil && cctx != ctx && context.Cause(cctx) == sluice.ErrTimeout && timedOut(&a.call, a.parent, err) {
		return ownTimeout(a.call.Report(c.serverOutcome(ctx, &a.call, errTimeoutStatus), pastDeadline{err}))
	}
	a.call.Report(o, nil)
	return err
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
		hctx, held = holdQuota(ctx, rt, a.call.Decision(), nil)
	}
	if rt != nil && rt.Guard != a.guard {
		var skip bool
		ctx, skip, err = c.identify(ctx, info.FullMethod, nil, false)
		if err != nil {
			return nil, false, nil, err
		}
		hctx = ctx
		if !skip {
			var call sluice.Call
			err := rt.Guard.Begin(ctx, &call)
			if err != nil {
				resp, err = c.rejectUnary(ctx, rt, call.Decision(), err)
				return resp, false, nil, err
			}
			hctx = call.Context()
			if c.quotaMD {
				hctx, held = holdQuota(hctx, rt, call.Decision(), nil)
			}
			resp, err = c.runUnary(ctx, hctx, &call, req, handler, held)
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
// lendsResource reports whether the method as the call's resource is all
// that identify would give a call, which a client call's context then
// carries through reqid.Lend: a rejected call gives it back.
func (c *config) lendsResource() bool {
	return c.resources && c.skip == nil && c.keyer == nil && c.critical == nil
}

func (c *config) identifies() bool {
	return c.skip != nil || c.keyer != nil || c.critical != nil || c.resources
}

// identify applies the skipper, the key functions, the priority and the
// resource. md is the tap's header metadata, nil in interceptors; outgoing
// marks a client call, whose headers are its outgoing metadata. It returns
// ctx with the call's key and, when it has one (WithKeyer) or
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
		kctx, err := routing.KeyContext(c.keyer, ctx, r)
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

// rejectUnary answers a unary call on route rt that its Guard rejected
// with err and Decision d: with the Guard's fallback when one declares an
// answer, else with the rejection.
func (c *config) rejectUnary(ctx context.Context, rt *routing.Route, d sluice.Decision, err error) (any, error) {
	if errors.Is(ctx.Err(), context.Canceled) {
		return c.answerUnary(ctx, rt, d, err) // a client gone: no fallback answers it
	}
	if resp, out, ok := c.fallback(ctx, rt, err); ok {
		_, fd, re := rejectionIn(out)
		if re == nil {
			return resp, out
		}
		// It declined: the rejection it returned is answered.
		d, err = fd, re
	}
	return c.answerUnary(ctx, rt, d, err)
}

// answerUnary answers a unary call on route rt with the rejection err, of
// Decision d: its trailers are set, and its error returned.
func (c *config) answerUnary(ctx context.Context, rt *routing.Route, d sluice.Decision, err error) (any, error) {
	a := c.answer(rt, d, err)
	if a.md != nil {
		if s := grpc.ServerTransportStreamFromContext(ctx); s != nil {
			_ = s.SetTrailer(a.md)
		}
	}
	return nil, a.err
}

// MetadataRetryPushback is the trailer metadata key of gRPC's retry
// pushback: the milliseconds a client's retryPolicy waits before it retries
// the call (gRFC A6). A rejection's trailers carry it, unless
// WithoutRetryPushback turns it off: trailers, not a header, so that the
// answer is trailers-only, the answer a grpc-go client with a retryPolicy
// retries, after the pushback.
const MetadataRetryPushback = "grpc-retry-pushback-ms"

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
	mu      sync.Mutex
	md      metadata.MD // nil once set or dropped
	settled atomic.Bool // md is nil: what a stream's every message asks first
}

// holdQuota returns the context for the handler of a call on route rt
// admitted with d, with a heldQuota holding d's quota metadata, which
// grpc.SetHeader and the like on that context release; without a
// transport stream in ctx (an interceptor called directly), it sets the
// metadata at once with set (nil: grpc.SetHeader on ctx).
func holdQuota(ctx context.Context, rt *routing.Route, d sluice.Decision, set func(metadata.MD) error) (context.Context, *heldQuota) {
	if !hasQuota(d) {
		return ctx, nil
	}
	md := quotaMetadata(rt, d, d.Reset)
	inner := grpc.ServerTransportStreamFromContext(ctx)
	if inner == nil {
		if set == nil {
			_ = grpc.SetHeader(ctx, md)
		} else {
			_ = set(md)
		}
		return ctx, nil
	}
	h := &heldQuota{ServerTransportStream: inner, md: md}
	return grpc.NewContextWithServerTransportStream(ctx, h), h
}

// settle sends the held metadata as the call's end asks: for a rejection,
// with the trailers (a trailers-only answer, which a grpc-go client's
// retryPolicy retries), or not at all when the rejection has a quota of
// its own (ownQuota); else in the header. Safe on a nil *heldQuota.
func (h *heldQuota) settle(rejected, ownQuota bool) {
	switch {
	case rejected && ownQuota:
		h.release(true)
	case rejected:
		h.trail()
	default:
		h.release(false)
	}
}

// release sets the held metadata on the stream, or drops it when drop is
// true; once. The metadata is set before release returns, in any goroutine
// that calls it, so that a header sent after it carries the metadata.
func (h *heldQuota) release(drop bool) {
	if h == nil || h.settled.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.md != nil && !drop {
		_ = h.ServerTransportStream.SetHeader(h.md)
	}
	h.md = nil
	h.settled.Store(true)
}

// trail sets the held metadata as trailers, once.
func (h *heldQuota) trail() {
	if h == nil || h.settled.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.md != nil {
		_ = h.ServerTransportStream.SetTrailer(h.md)
	}
	h.md = nil
	h.settled.Store(true)
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

// retryDelay is the delay a rejection announces: its RetryAfter, or one
// second when the policy cannot know it, as the HTTP adapters' Retry-After.
func retryDelay(d sluice.Decision) time.Duration {
	if d.RetryAfter > 0 {
		return d.RetryAfter
	}
	return time.Second
}

// quotaMetadata renders d's quota as the draft RateLimit fields.
func quotaMetadata(rt *routing.Route, d sluice.Decision, reset time.Duration) metadata.MD {
	var buf [128]byte
	pol := string(routing.AppendRateLimitPolicy(buf[:0], d.Policy, d.Limit, rt.Window(d.Policy)))
	lim := string(routing.AppendRateLimit(buf[:0], d.Policy, d.Remaining, reset))
	return metadata.MD{MetadataRateLimitPolicy: {pol}, MetadataRateLimit: {lim}}
}

// timeoutStatus turns the error of a call that ran past its Guard's timeout
// (sluice.WithTimeout) into DeadlineExceeded, the code gRPC gives a deadline
// that passed; other errors are returned as they are.
func timeoutStatus(err error) error {
	var te *timeouterr.Error
	if errors.As(err, &te) {
		return status.Error(codes.DeadlineExceeded, "sluice: timeout after "+te.After.String())
	}
	return err
}
