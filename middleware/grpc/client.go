package sluicegrpc

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/reqid"
	"github.com/sluice-go/sluice/middleware"
)

// UnaryClientInterceptor returns an interceptor (install it with
// grpc.WithUnaryInterceptor) that guards outgoing unary calls: the Guard of
// the method (WithMethodGuard), else of the connection's target
// (WithTargetGuard), else the default (WithGuard); calls with none pass
// through. A rejection, an open breaker for one, fails the call at once,
// without calling the server, with the rejection status (see the package doc) as its error (it also
// matches sluice.ErrRejected and its cause with errors.Is). An admitted
// call's outcome is the error it returned, classified by WithClassifier
// (default [Classify]: Unavailable, DeadlineExceeded, Internal, Unknown and
// DataLoss are failures). WithTimeout bounds each guarded call; past the
// Guard's deadline, an error that classifies as a failure ends the call as
// its timeout (DeadlineExceeded), and another (a NotFound answered as the
// deadline came) goes back as itself. A call whose
// context has already ended (a handler's inherited deadline that passed)
// goes on unguarded, for gRPC to fail unsent with its context's status
// (Canceled, DeadlineExceeded): it asks the Guard nothing and counts as no
// failure. One admitted as its context ended, after a policy of the Guard
// made it wait, gives back what the Guard took (sluice.Released) and goes on
// the same way (a policy that gives up the wait as the context ends, such as
// a queued concurrency limit, rejects it instead).
//
// A server that answers Unavailable or ResourceExhausted with an
// errdetails.RetryInfo (a sluice server's rejection, or any server that
// follows the gRPC error model) holds every policy of the call's Guard that
// can be held open (a sluice.Opener: a breaker.Breaker; of a breaker.Group,
// the breaker of the call's key) open for that delay, capped by
// WithMaxRetryDelay: the client stops calling a server that asked it to wait.
//
// A call whose Guard is declared with sluice.WithRetry is tried again when
// an attempt fails with Unavailable, or with ResourceExhausted that asks for
// a delay (not gRPC's own message size limits, nor by the Guard's own
// rejection), each attempt admitted afresh and drawing on the Guard's
// retry budget, after at least the delay the server asked for
// (grpc-retry-pushback-ms, RetryInfo) and never past the call's deadline; a
// pushback that is negative, unreadable or repeated ends the retries, as
// gRPC's own retries read it. Give
// each target its Guard (WithTargetGuard) for a budget per target.
//
// Key functions see the method as the request's Route and the outgoing
// metadata as its headers.
func UnaryClientInterceptor(opts ...Option) (grpc.UnaryClientInterceptor, error) {
	c, err := build(clientSide, opts)
	if err != nil {
		return nil, err
	}
	return c.unaryClient, nil
}

func target(cc *grpc.ClientConn) string {
	if cc == nil {
		return ""
	}
	return cc.Target()
}

func (c *config) unaryClient(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	rt := c.clientRoute(method, target(cc))
	if rt == nil {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if ctx.Err() != nil {
		// Ended already: gRPC fails it without sending it. It goes on
		// unguarded, so that what follows (interceptors, stats handlers)
		// sees it as ever, and counts for nothing here.
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if c.lendsResource() {
		if c.namesResource(rt.Guard) {
			ctx = reqid.Lend(ctx, method)
		}
	} else if c.identifies() {
		var skip bool
		var err error
		ctx, skip, err = c.identify(ctx, method, nil, true)
		if err != nil {
			return err
		}
		if skip {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
	}
	if _, retries := guardhook.RetryDelay(rt.Guard, ctx, 0, time.Time{}, 0); retries {
		return c.unaryRetried(ctx, rt.Guard, method, req, reply, cc, invoker, opts)
	}
	return c.unaryAttempt(ctx, rt.Guard, method, req, reply, cc, invoker, opts)
}

// namesResource reports whether an outgoing call guarded by g carries its
// method as its resource: when WithMethodResource asks, or g reads it.
func (c *config) namesResource(g *sluice.Guard) bool {
	return c.askedResources || guardhook.ReadsResource(g)
}

// unaryAttempt is one attempt of a unary call guarded by g.
func (c *config) unaryAttempt(ctx context.Context, g *sluice.Guard, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	var call sluice.Call
	err := g.Begin(ctx, &call)
	if err != nil {
		err = c.answer(nil, call.Decision(), err).err
		reqid.GiveBack(ctx, g)
		return err
	}
	ctx = reqid.Keep(ctx)
	if ctx.Err() != nil {
		// It ended while a policy made it wait: it gives back what the
		// Guard took, and goes on unguarded, for gRPC to fail unsent.
		call.Report(sluice.Released, nil)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	err = c.invoke(ctx, &call, method, req, reply, cc, invoker, opts)
	if err != nil {
		c.holdOpen(ctx, g, err)
	}
	return err
}

// unaryRetried runs a unary call guarded by g, which declares retries
// (sluice.WithRetry): an attempt that fails with Unavailable, or with
// ResourceExhausted when the server asked for a delay (gRPC's own message
// size limits fail with it on the client, and fail again), not by g's own
// rejection, is tried again after at least the delay the server asked for,
// in its grpc-retry-pushback-ms trailer or its RetryInfo, while g's retry
// budget and ctx's deadline allow. A pushback that is negative or
// unreadable means: do not retry.
func (c *config) unaryRetried(ctx context.Context, g *sluice.Guard, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	ctx = reqid.Keep(ctx) // an attempt after the first is begun with a context gRPC has had
	var trailer metadata.MD
	opts = append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))
	for attempts := 1; ; attempts++ {
		trailer = nil
		began := time.Now() // how long an attempt takes, for the deadline
		err := c.unaryAttempt(ctx, g, method, req, reply, cc, invoker, opts)
		if err == nil || ctx.Err() != nil || errors.Is(err, sluice.ErrRejected) {
			return err
		}
		code := status.Code(err)
		if code != codes.Unavailable && code != codes.ResourceExhausted {
			return err
		}
		atLeast, asked, ok := pushback(trailer, err)
		if !ok || code == codes.ResourceExhausted && !asked {
			return err
		}
		d, ok := guardhook.RetryDelay(g, ctx, attempts, began, atLeast)
		if !ok {
			return err
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// pushback returns the least delay before a retry that a server asked for
// in its failure err and trailer: the longer of grpc-retry-pushback-ms and
// RetryInfo, 0 when it asked for none, and whether it asked; ok is false
// when its pushback says not to retry (negative, unreadable, or given more
// than once).
func pushback(trailer metadata.MD, err error) (d time.Duration, asked, ok bool) {
	if v := trailer.Get(MetadataRetryPushback); len(v) > 0 {
		if len(v) > 1 {
			return 0, true, false // ambiguous: gRPC's own retries give up too
		}
		ms, perr := strconv.ParseInt(v[0], 10, 64)
		if perr != nil || ms < 0 {
			return 0, true, false
		}
		asked = true
		// Capped only to stay a Duration: a delay that long is past any
		// Retry's MaxBackoff, which ends the retries.
		d = time.Duration(min(ms, int64(1<<63-1)/int64(time.Millisecond))) * time.Millisecond
	}
	st, _ := status.FromError(err)
	for _, det := range st.Details() {
		if ri, ok := det.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			// As the trailer's: a negative delay ends the retries; none
			// (0) announces no delay, as RejectionOf reads it.
			switch rd := ri.GetRetryDelay().AsDuration(); {
			case rd < 0 || ri.GetRetryDelay().CheckValid() != nil:
				return 0, true, false
			case rd > 0:
				d, asked = max(d, rd), true
			}
		}
	}
	return d, asked, true
}

// holdOpen holds g's breakers open for the delay of err's RetryInfo, capped
// by WithMaxRetryDelay, from now, when err is a peer's Unavailable or
// ResourceExhausted that carries one: the whole delay, however long the
// call took. The client's own rejections never do.
func (c *config) holdOpen(ctx context.Context, g *sluice.Guard, err error) {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted:
	default:
		return
	}
	if errors.Is(err, sluice.ErrRejected) {
		return
	}
	st, _ := status.FromError(err)
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			delay = ri.GetRetryDelay().AsDuration()
		}
	}
	if delay = min(delay, c.maxRetry); delay <= 0 {
		return
	}
	now := guardhook.Now(g)
	for _, p := range g.Policies() {
		if o, ok := p.(sluice.Opener); ok {
			o.OpenFor(ctx, now, delay)
		}
	}
}

// invoke runs a call that call admitted (begun with ctx) and ends call
// with its outcome.
func (c *config) invoke(ctx context.Context, call *sluice.Call, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) (err error) {
	returned := false
	defer func() {
		if !returned { // the invoker panicked
			call.Report(sluice.Failure, nil)
		}
	}()
	ictx := call.Context() // with the Guard's deadline (sluice.WithTimeout), if it has one
	if c.timeout > 0 {
		if dl, ok := ictx.Deadline(); !ok || time.Until(dl) > c.timeout {
			var cancel context.CancelFunc
			ictx, cancel = context.WithTimeout(ictx, c.timeout)
			defer cancel()
		}
	}
	err = invoker(ictx, method, req, reply, cc, opts...)
	returned = true
	// Past the Guard's deadline, an error that classifies as a failure is
	// the timeout; another (a NotFound the server answered as the deadline
	// came) goes back as itself, as on a server.
	o := c.outcome(call, err)
	if timeoutOf(o, err) && timedOut(call, ctx, err) {
		return timeoutStatus(call.Report(c.outcome(call, errTimeoutStatus), pastDeadline{err}))
	}
	call.Report(o, nil)
	return err
}

// StreamClientInterceptor returns an interceptor (install it with
// grpc.WithStreamInterceptor) that guards outgoing streams as
// UnaryClientInterceptor guards calls: the stream is admitted when it opens
// (a rejection fails NewStream without calling the server), and its outcome
// is recorded once when it ends, however it ends: with its final status
// (OK, as RecvMsg's io.EOF tells, a success; any other, classified), when
// SendMsg fails with other than io.EOF, or when its context ends or its
// ClientConn closes first (classified by the status gRPC gives them: a
// cancellation and a closed ClientConn, codes.Canceled, are Ignored). A final
// status with a RetryInfo holds the breakers open as for a unary call. A
// stream whose context has already ended, or ends while a policy makes it
// wait, goes on unguarded, as a unary call does.
// WithTimeout does not apply to streams, and nor do the Guard's retries: a
// stream that never reached the server gRPC already retries itself, and one
// that did has sent messages that cannot be sent again without keeping them
// all, as gRPC's own retries (a service config's retryPolicy) do.
func StreamClientInterceptor(opts ...Option) (grpc.StreamClientInterceptor, error) {
	c, err := build(clientSide, opts)
	if err != nil {
		return nil, err
	}
	return c.streamClient, nil
}

func (c *config) streamClient(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	rt := c.clientRoute(method, target(cc))
	if rt == nil {
		return streamer(ctx, desc, cc, method, opts...)
	}
	if ctx.Err() != nil {
		return streamer(ctx, desc, cc, method, opts...) // as for a unary call
	}
	if c.lendsResource() {
		if c.namesResource(rt.Guard) {
			ctx = reqid.Lend(ctx, method)
		}
	} else {
		var skip bool
		var err error
		ctx, skip, err = c.identify(ctx, method, nil, true)
		if err != nil {
			return nil, err
		}
		if skip {
			return streamer(ctx, desc, cc, method, opts...)
		}
	}
	var call sluice.Call
	err := rt.Guard.Begin(ctx, &call)
	if err != nil {
		err = c.answer(nil, call.Decision(), err).err
		reqid.GiveBack(ctx, rt.Guard)
		return nil, err
	}
	ctx = reqid.Keep(ctx)
	if ctx.Err() != nil {
		call.Report(sluice.Released, nil) // as for a unary call
		return streamer(ctx, desc, cc, method, opts...)
	}
	// The stream owns the admission from here: call is not used again.
	return c.openStream(ctx, desc, cc, method, streamer, opts, rt.Guard, call)
}

// openStream opens a stream that call admitted; the stream ends call, the
// one copy of it that is ended. The Guard's deadline does not apply to
// streams: the stream runs with ctx.
func (c *config) openStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts []grpc.CallOption, g *sluice.Guard, call sluice.Call) (grpc.ClientStream, error) {
	s := &clientStream{c: c, g: g, ctx: ctx, call: call, serverStreams: desc.ServerStreams}
	opened := false
	defer func() {
		if !opened && s.ended.CompareAndSwap(false, true) {
			s.call.Report(sluice.Failure, nil) // the streamer panicked
		}
	}()
	// gRPC calls OnFinish once, when the stream is over, however it ends:
	// its final status, its context's end, its ClientConn's Close, a failure
	// to open it. The other ends below stay for streamers that do not.
	opts = append(opts[:len(opts):len(opts)], grpc.OnFinish(s.endAside))
	cs, err := streamer(ctx, desc, cc, method, opts...)
	opened = true
	if err != nil {
		s.end(err)
		return nil, err
	}
	s.ClientStream = cs
	stop := context.AfterFunc(ctx, func() { s.endAside(status.FromContextError(ctx.Err()).Err()) })
	s.stop.Store(&stop)
	if s.ended.Load() {
		stop() // it ended while being opened: forget the context
	}
	return s, nil
}

// clientStream records a guarded stream's outcome once, when it ends.
type clientStream struct {
	grpc.ClientStream
	c             *config
	g             *sluice.Guard
	ctx           context.Context // the context the Guard admitted the stream with
	call          sluice.Call     // the admission, ended once, by end
	ended         atomic.Bool
	stop          atomic.Pointer[func() bool] // unregisters the context's end
	serverStreams bool
}

// endAside is end on a goroutine no caller owns (gRPC's OnFinish, the
// context's AfterFunc): a classifier's panic there would end the process,
// so it is recovered, the call ended as a Failure (core.Classified ended it
// before the panic went on).
func (s *clientStream) endAside(err error) {
	defer func() { _ = recover() }()
	s.end(err)
}

// end records the outcome of the stream, once, whichever of its ends comes
// first: gRPC's OnFinish, RecvMsg or SendMsg, the context's end. It can run
// on any goroutine.
func (s *clientStream) end(err error) {
	if !s.ended.CompareAndSwap(false, true) {
		return
	}
	if stop := s.stop.Load(); stop != nil {
		(*stop)()
	}
	s.call.Report(s.c.outcome(&s.call, err), nil)
	if err != nil {
		s.c.holdOpen(s.ctx, s.g, err)
	}
}

// RecvMsg receives a message; the stream has ended when it returns an error
// (io.EOF: success), or, for a stream whose server sends one message, after
// that message.
func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	switch {
	case errors.Is(err, io.EOF):
		s.end(nil)
	case err != nil:
		s.end(err)
	case !s.serverStreams:
		s.end(nil)
	}
	return err
}

// SendMsg sends a message; an error other than io.EOF (whose status RecvMsg
// tells) ends the stream.
func (s *clientStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && !errors.Is(err, io.EOF) {
		s.end(err)
	}
	return err
}

var _ middleware.Request = (*request)(nil)
