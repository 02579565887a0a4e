package sluicegrpc

import (
	"context"
	"sync/atomic"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// StreamServerInterceptor returns an interceptor that guards streams with
// their method's Guard, as UnaryServerInterceptor guards calls: the stream is
// admitted once when it opens (a rejection ends it before its handler runs),
// and its outcome, the handler's returned error classified as for a unary
// call, is recorded when it ends. With WithMessageGuard, every message the
// stream receives is asked for too. The Guard's call timeout
// (sluice.WithTimeout) does not apply to streams, which live as long as
// they need to, whether a ServerInHandle admitted them or not.
func StreamServerInterceptor(opts ...Option) (grpc.StreamServerInterceptor, error) {
	c, err := build(serverSide, opts)
	if err != nil {
		return nil, err
	}
	return c.streamServer, nil
}

func (c *config) streamServer(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	var a *tapAdmission
	if tapsLive.Load() > 0 {
		if t := tapAdmissionFrom(ss.Context()); t != nil && t.claim() {
			a = t
		}
	}
	return c.serveStream(srv, ss, info, handler, a)
}

func (c *config) serveStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler, a *tapAdmission) (err error) {
	defer a.failOnPanic()
	rt := c.route(info.FullMethod)
	if rt != nil && a != nil && rt.Guard == a.guard {
		rt = nil // the tap's admission stands for this route's
	}
	msg := c.messageRoute(info.FullMethod)
	if rt == nil && msg == nil {
		err = handler(srv, ss)
		a.record(c.outcome(err))
		return err
	}
	ctx, skip, err := c.identify(ss.Context(), info.FullMethod, nil, false)
	if err != nil {
		a.record(sluice.Released)
		return err
	}
	if skip {
		err = handler(srv, ss)
		a.record(c.outcome(err))
		return err
	}
	var done sluice.Done
	if rt != nil {
		d, dn, err := rt.Guard.Admit(ctx)
		if err != nil {
			a.record(sluice.Released)
			return rejectCall(ctx, rt, d, err, streamHeader(ss))
		}
		done = dn
		if c.quotaMD {
			setQuota(ctx, rt, d, streamHeader(ss))
		}
	}
	defer func() {
		if done.Active() {
			done.Record(sluice.Failure)
		}
	}()
	if !c.identifies() && msg == nil { // the handler's stream needs nothing more
		err = handler(srv, ss)
	} else {
		w := &serverStream{ServerStream: ss, ctx: ctx, msg: msg}
		err = handler(srv, w)
		if r := w.rejected.Load(); r != nil {
			err = r
		}
	}
	o := c.outcome(err)
	done.Record(o)
	a.record(o)
	return err
}

// streamHeader adapts a stream's SetHeader to the shape of grpc.SetHeader.
func streamHeader(ss grpc.ServerStream) func(context.Context, metadata.MD) error {
	return func(_ context.Context, md metadata.MD) error { return ss.SetHeader(md) }
}

// serverStream is a guarded stream as its handler sees it: its context
// carries the call's key, and each received message is asked for when a
// message guard is set.
type serverStream struct {
	grpc.ServerStream
	ctx      context.Context
	msg      *middleware.Route
	rejected atomic.Pointer[rejection]
}

// Context returns the stream's context, with the call's key.
func (s *serverStream) Context() context.Context { return s.ctx }

// RecvMsg receives the next message and, with a message guard, asks it for
// the message. A rejected message ends the stream: this and every later
// RecvMsg return the rejection, with the status of its cause
// (ResourceExhausted for a rate limit, Unavailable for the others).
func (s *serverStream) RecvMsg(m any) error {
	if r := s.rejected.Load(); r != nil {
		return r
	}
	if err := s.ServerStream.RecvMsg(m); err != nil || s.msg == nil {
		return err
	}
	d, done, err := s.msg.Guard.Admit(s.ctx)
	if err != nil {
		r := newRejection(err, d)
		if d.Limit >= 0 && d.Policy != "" {
			s.ServerStream.SetTrailer(quotaMetadata(s.msg, d, retryDelay(d)))
		}
		s.rejected.CompareAndSwap(nil, r)
		return s.rejected.Load()
	}
	done.Record(sluice.Success)
	return nil
}
