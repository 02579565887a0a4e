package sluicegrpc

import (
	"context"
	"sync/atomic"

	"github.com/sluice-go/sluice"
	"google.golang.org/grpc/tap"
)

// ServerInHandle returns a tap.ServerInHandle (install it with
// grpc.InTapHandle) that admits each call with its method's Guard as soon as
// its headers arrive, before gRPC reads the request or starts a goroutine
// for it: the cheapest place to turn away calls over a rate limit or an
// overloaded server. A rejection answers the call with [RejectionStatus]
// (no header metadata can be sent from there). Key functions and skippers see
// the call's header metadata and peer.
//
// gRPC runs the handle on the connection's reading goroutine, under a lock:
// give it Guards whose policies never wait (no shaper, no concurrency queue).
//
// An admitted call's admission rides in its context until it ends. The
// interceptors of this package end it with the call's outcome, so install
// UnaryServerInterceptor and StreamServerInterceptor too; when their route
// has the same Guard they do not ask it again, and when it has another they
// ask that one as well. UnaryServerInterceptor also applies the tap's
// Guard's call timeout (sluice.WithTimeout) to the unary calls it admitted.
// A call that no interceptor ends (an unknown method) is recorded as Ignored
// when its context ends.
//
// WithQuotaMetadata and WithMessageGuard have no meaning here and are
// refused.
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
	guard *sluice.Guard
	done  sluice.Done
	stop  func() bool
}

func tapAdmissionFrom(ctx context.Context) *tapAdmission {
	a, _ := ctx.Value(tapKey{}).(*tapAdmission)
	return a
}

// claim makes the caller the one that ends the admission. It reports false
// when another interceptor claimed it first or the call's context already
// ended it.
func (a *tapAdmission) claim() bool { return a.stop() }

// record ends a claimed admission with outcome o; only the first counts. A
// nil a does nothing.
func (a *tapAdmission) record(o sluice.Outcome) {
	if a != nil {
		a.done.Record(o)
	}
}

func (a *tapAdmission) failOnPanic() {
	if a != nil && a.done.Active() {
		a.done.Record(sluice.Failure)
	}
}

// abandon ends an admission that no interceptor claimed, when the call's
// context ends: its outcome is unknown.
func (a *tapAdmission) abandon() { a.done.Record(sluice.Ignored) }

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
	d, done, err := rt.Guard.Admit(kctx)
	if err != nil {
		return ctx, newRejection(err, d)
	}
	a := &tapAdmission{guard: rt.Guard, done: done}
	a.stop = context.AfterFunc(ctx, a.abandon)
	return context.WithValue(kctx, tapKey{}, a), nil
}
