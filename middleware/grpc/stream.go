package sluicegrpc

import (
	"context"
	"io"
	"sync/atomic"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/middleware/internal/routing"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// StreamServerInterceptor returns an interceptor that guards streams with
// their method's Guard, as UnaryServerInterceptor guards calls: the stream is
// admitted once when it opens (a rejection ends it before its handler runs),
// and its outcome, the handler's returned error classified as for a unary
// call, is recorded when it ends; a sluice rejection the handler returns
// (one its own call met) ends the stream with the rejection's status, on a
// stream let through unguarded too. A stream whose client went away is
// Ignored, whatever the handler returned: its context was cancelled, or
// gRPC failed one of its SendMsg or RecvMsg with Unavailable or Canceled
// (the client reset the stream or its connection closed). With
// WithMessageGuard, every message the stream receives is asked for too. The
// Guard's call timeout (sluice.WithTimeout) does not apply to streams, which
// live as long as they need to, whether a ServerInHandle admitted them or
// not.
func StreamServerInterceptor(opts ...Option) (grpc.StreamServerInterceptor, error) {
	c, err := build(streamServerSide, opts)
	if err != nil {
		return nil, err
	}
	return c.streamServer, nil
}

func (c *config) streamServer(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	var a *tapAdmission
	if tapsLive.Load() > 0 {
		if t := tapAdmissionFrom(ss.Context()); t != nil {
			if t.claim() {
				a = t
			} else if t.gone() {
				return goneStatus(ss.Context())
			}
		}
	}
	return c.serveStream(srv, ss, info, handler, a)
}

func (c *config) serveStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler, a *tapAdmission) (err error) {
	defer a.failOnPanic()
	rt := c.route(info.FullMethod)
	own := rt // the route whose Guard's rejections name its windows
	// The admission whose quota fields, with WithQuotaMetadata, are held
	// back from the header as a unary call's are (see serverStream.held).
	var quoted *sluice.Call
	if rt != nil && a != nil && rt.Guard == a.guard {
		quoted = &a.call
		rt = nil // the tap's admission stands for this route's
	}
	msg := c.messageRoute(info.FullMethod)
	if rt == nil && msg == nil && a == nil {
		// Nothing to guard, no outcome to record; a rejection the handler
		// returns is answered all the same.
		return c.streamError(ss, own, handler(srv, ss))
	}
	if rt == nil && msg == nil {
		w := c.newServerStream(ss, ss.Context(), nil, own, quoted)
		defer w.release() // a handler that panics: its fields go out, as on a unary call
		err = handler(srv, w)
		a.record(c.streamOutcome(a.claimed(), w, err))
		return c.endStream(w, own, err)
	}
	ctx, skip, err := c.identify(ss.Context(), info.FullMethod, nil, false)
	if err != nil {
		a.record(sluice.Released)
		return err
	}
	if skip {
		w := c.newServerStream(ss, ss.Context(), nil, own, quoted)
		defer w.release()
		err = handler(srv, w)
		a.record(c.streamOutcome(a.claimed(), w, err))
		return c.endStream(w, own, err)
	}
	// The stream's admission by the route's Guard; the zero Call, which
	// Report leaves alone, when the route has none. The Guard's deadline
	// does not apply to streams: the handler runs with ctx.
	var call sluice.Call
	if rt != nil {
		err = rt.Guard.Begin(ctx, &call)
		if err != nil {
			a.record(sluice.Released)
			return c.rejectStream(ss, rt, call.Decision(), err)
		}
		quoted = &call
	}
	defer call.Report(sluice.Failure, nil) // the handler panicked; nothing once reported
	w := c.newServerStream(ss, ctx, msg, own, quoted)
	defer w.release()
	err = handler(srv, w)
	if r := w.rejected.Load(); r != nil {
		err = r
	}
	o := c.streamOutcome(&call, w, err)
	call.Report(o, nil)
	a.record(o)
	// A rejection the handler's own call met goes out as a rejection
	// status, as the interceptor's own do, not as the handler's text.
	return c.endStream(w, own, err)
}

// newServerStream returns the stream the handler of ss sees, with context
// ctx and message route msg. With WithQuotaMetadata, the quota fields of
// quoted (nil: none), admitted on route rt, are held back from the header
// (see serverStream.held), through the stream and through the context's
// transport stream, which grpc.SendHeader reaches; without a transport
// stream in ctx (an interceptor called directly), they are set at once.
func (c *config) newServerStream(ss grpc.ServerStream, ctx context.Context, msg, rt *routing.Route, quoted *sluice.Call) *serverStream {
	w := &serverStream{ServerStream: ss, c: c, ctx: ctx, msg: msg}
	if c.quotaMD && quoted != nil {
		w.ctx, w.held = holdQuota(ctx, rt, quoted.Decision(), ss.SetHeader)
	}
	return w
}

// endStream is the error that ends the stream w, on route own, whose
// handler returned err (see streamError); the admission's quota fields
// still held go with the trailers when it ends in a rejection (a
// trailers-only answer, which a grpc-go client's retryPolicy retries), are
// dropped for a rejection's own, and go in the header otherwise.
func (c *config) endStream(w *serverStream, own *routing.Route, err error) error {
	r, d, rej := rejectionIn(err)
	w.held.settle(r != nil && !r.client || rej != nil, hasQuota(d))
	return c.streamError(w.ServerStream, own, err)
}

// rejectStream answers the rejection err, with Decision d, of a stream ss
// on route rt: its trailers are set, and the error returned.
func (c *config) rejectStream(ss grpc.ServerStream, rt *routing.Route, d sluice.Decision, err error) error {
	a := c.answer(rt, d, err)
	if a.md != nil {
		ss.SetTrailer(a.md)
	}
	return a.err
}

// streamError is the error that ends a stream ss on route own (nil: none)
// whose handler returned err: a sluice rejection that err is or wraps is
// answered as the interceptor answers its own (a server interceptor's
// within, which set its trailers, stands as it is); one by another Guard
// than own's names no window, as own's windows may name another policy's
// of the same name. Any other error is returned as it is.
func (c *config) streamError(ss grpc.ServerStream, own *routing.Route, err error) error {
	r, d, rej := rejectionIn(err)
	switch {
	case r != nil && !r.client: // a server interceptor's within: its trailers are set
		return r
	case rej != nil:
		if own != nil && !guardhook.RejectedBy(rej, own.Guard) {
			own = nil
		}
		return c.rejectStream(ss, own, d, rej)
	}
	return err
}

// streamOutcome is the outcome of the stream w whose handler returned err:
// Ignored when its client went away, else err classified.
func (c *config) streamOutcome(call *sluice.Call, w *serverStream, err error) sluice.Outcome {
	switch w.end.Load() {
	case streamGone:
		// gRPC fails a stream's SendMsg as soon as its connection closes,
		// and cancels its context a moment later.
		return sluice.Ignored
	case streamEndedByServer:
		// gRPC wrote the failed message's status and cancelled the context
		// itself: the client did not go away.
		return c.outcome(call, err)
	}
	return c.serverOutcome(w.ServerStream.Context(), call, err)
}

// serverStream is a guarded stream as its handler sees it: its context
// carries the call's key, each received message is asked for when a message
// guard is set, and it notes when gRPC tells that the client went away.
type serverStream struct {
	grpc.ServerStream
	c        *config
	ctx      context.Context
	msg      *routing.Route
	rejected atomic.Pointer[rejection]
	end      atomic.Int32 // 0, then streamGone or streamEndedByServer, once
	// held holds the admission's quota metadata (WithQuotaMetadata) back
	// until the handler sets or sends a header (on the stream, or through
	// its context) or a message, or the stream ends; nil: none.
	held *heldQuota
}

// release sets the held metadata in the header, before the handler's own
// header or first message goes out.
func (s *serverStream) release() { s.held.release(false) }

// SetHeader sets the held metadata, then md.
func (s *serverStream) SetHeader(md metadata.MD) error {
	s.release()
	return s.ServerStream.SetHeader(md)
}

// SendHeader sets the held metadata, then sends the header with md.
func (s *serverStream) SendHeader(md metadata.MD) error {
	s.release()
	return s.ServerStream.SendHeader(md)
}

const (
	streamGone int32 = iota + 1
	streamEndedByServer
)

// Context returns the stream's context, with the call's key.
func (s *serverStream) Context() context.Context { return s.ctx }

// note marks the stream gone when err, from gRPC's SendMsg or RecvMsg, tells
// that the client went away: Unavailable (its connection is closing) or
// Canceled (it reset the stream).
func (s *serverStream) note(err error) {
	if err == io.EOF {
		return // the client's half-close
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled:
		s.end.CompareAndSwap(0, streamGone)
	default:
		s.end.CompareAndSwap(0, streamEndedByServer)
	}
}

// SendMsg sends a message, after the held metadata.
func (s *serverStream) SendMsg(m any) error {
	s.release()
	err := s.ServerStream.SendMsg(m)
	if err != nil {
		s.note(err)
	}
	return err
}

// RecvMsg receives the next message and, with a message guard, asks it for
// the message. A rejected message ends the stream: this and every later
// RecvMsg return the rejection, with the status of its cause
// (ResourceExhausted for a rate limit, Unavailable for the others).
func (s *serverStream) RecvMsg(m any) error {
	if r := s.rejected.Load(); r != nil {
		return r
	}
	if err := s.ServerStream.RecvMsg(m); err != nil || s.msg == nil {
		if err != nil {
			s.note(err)
		}
		return err
	}
	var call sluice.Call
	err := s.msg.Guard.Begin(s.ctx, &call)
	if err != nil {
		a := s.c.answer(s.msg, call.Decision(), err)
		if a.md != nil {
			s.ServerStream.SetTrailer(a.md)
		}
		s.rejected.CompareAndSwap(nil, a.err)
		return s.rejected.Load()
	}
	call.Report(sluice.Success, nil)
	return nil
}
