package sluicegrpc

import (
	"context"
	"sync/atomic"

	"github.com/sluice-go/sluice"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// ServerInHandle returns a tap.ServerInHandle (install it with
// grpc.InTapHandle) that admits each call with its method's Guard as soon as
// its headers arrive, before gRPC reads the request or starts a goroutine
// for it: the cheapest place to turn away calls over a rate limit or an
// overloaded server. A rejection answers the call with the rejection status (see the package doc)
// (no metadata can be sent from there: neither the RateLimit fields nor a
// retry pushback, so a client's retryPolicy retries it with its own
// backoff). Key functions and skippers see
// the call's header metadata and peer.
//
// gRPC runs the handle on the connection's reading goroutine, under a lock:
// a Guard with a policy that may wait (a shaper, a concurrency queue) is
// refused, since one waiting call would stall the whole connection.
//
// An admitted call's admission rides in its context until it ends. The
// interceptors of this package end it with the call's outcome, so install
// UnaryServerInterceptor and StreamServerInterceptor too; when their route
// has the same Guard they do not ask it again, and when it has another they
// ask that one as well. UnaryServerInterceptor also applies the tap's
// Guard's call timeout (sluice.WithTimeout) to the unary calls it admitted.
// A call that no interceptor ends (an unknown method) is recorded as Ignored
// when its context ends. So is a call whose context ends (its client went
// away, or its deadline passed) before an interceptor takes its admission;
// the interceptors then answer it with its context's status (Canceled,
// DeadlineExceeded) without running its handler or asking any Guard again.
//
// WithQuotaMetadata and WithMessageGuard have no meaning here and are
// refused; give WithQuotaMetadata to the interceptors, which send the tap's
// quota on the calls it admitted with their route's Guard.
func ServerInHandle(opts ...Option) (tap.ServerInHandle, error) {
	c, err := build(tapSide, opts)
	if err != nil {
		return nil, err
	}
	tapsLive.Add(1)
	return c.tapHandle, nil
}

// tapsLive counts the ServerInHandles built in this process. While it is 0,
// the interceptors do not look for a tap's admission in the context.
var tapsLive atomic.Int64

type tapKey struct{}

// tapAdmission is a call admitted by a ServerInHandle, until it ends.
type tapAdmission struct {
	guard  *sluice.Guard
	call   sluice.Call     // the admission; its Decision is the tap's, for the interceptors' quota metadata
	parent context.Context // the context the call was admitted with
	state  atomic.Int32    // tapOpen, then tapClaimed or tapGone, once
	stop   func() bool
}

// The states of a tapAdmission.
const (
	tapOpen    int32 = iota // neither claimed nor abandoned yet
	tapClaimed              // an interceptor ends it
	tapGone                 // the call's context ended first: abandoned
)

func tapAdmissionFrom(ctx context.Context) *tapAdmission {
	a, _ := ctx.Value(tapKey{}).(*tapAdmission)
	return a
}

// claim makes the caller the one that ends the admission. It reports false
// when another interceptor claimed it first or the call's context already
// ended it (gone then tells).
func (a *tapAdmission) claim() bool {
	if !a.state.CompareAndSwap(tapOpen, tapClaimed) {
		return false
	}
	a.stop()
	return true
}

// gone reports whether the call's context ended before an interceptor
// claimed the admission, which then ended Ignored.
func (a *tapAdmission) gone() bool { return a.state.Load() == tapGone }

// record ends a claimed admission with outcome o; only the first counts. A
// nil a does nothing.
func (a *tapAdmission) record(o sluice.Outcome) {
	if a != nil {
		a.call.Report(o, nil)
	}
}

// claimed returns the call of a claimed admission, nil for none.
func (a *tapAdmission) claimed() *sluice.Call {
	if a == nil {
		return nil
	}
	return &a.call
}

// failOnPanic ends a claimed admission that is still open as a Failure: its
// call panicked. A nil a, or one ended already, is left as it is.
func (a *tapAdmission) failOnPanic() {
	if a != nil {
		a.call.Report(sluice.Failure, nil)
	}
}

// callContext returns ctx, the interceptor's context of the call, bounded
// by the deadline the tap's Guard gave the call (sluice.WithTimeout), with
// the function that releases it; ctx and nil when it gave none. The
// deadline is the admission's, but ctx carries what gRPC added to the call's
// context after the tap.
func (a *tapAdmission) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	tctx := a.call.Context()
	if tctx == a.parent {
		return ctx, nil
	}
	dl, ok := tctx.Deadline()
	if !ok {
		return ctx, nil
	}
	return context.WithDeadlineCause(ctx, dl, sluice.ErrTimeout)
}

// abandon ends an admission that no interceptor claimed, when the call's
// context ends: its outcome is unknown.
func (a *tapAdmission) abandon() {
	if a.state.CompareAndSwap(tapOpen, tapGone) {
		a.call.Report(sluice.Ignored, nil)
	}
}

// goneStatus answers a call whose context ended before an interceptor
// claimed its tap's admission: with the status of that end.
func goneStatus(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Canceled, "sluice: the call's client went away")
}

func (c *config) tapHandle(ctx context.Context, info *tap.Info) (context.Context, error) {
	rt := c.route(info.FullMethodName)
	if rt == nil {
		return ctx, nil
	}
	kctx, skip, err := c.identify(ctx, info.FullMethodName, info.Header, false)
	if err != nil {
		return ctx, err
	}
	if skip {
		return ctx, nil
	}
	var call sluice.Call
	err = rt.Guard.Begin(kctx, &call)
	if err != nil {
		return ctx, c.answer(nil, call.Decision(), err).err
	}
	a := &tapAdmission{guard: rt.Guard, call: call, parent: kctx}
	a.stop = context.AfterFunc(ctx, a.abandon)
	return context.WithValue(kctx, tapKey{}, a), nil
}
