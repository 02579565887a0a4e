package sluicegrpc

import (
	"context"
	"errors"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware/internal/core"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Classify is the default classifier of the interceptors. nil (codes.OK) is a
// Success. A sluice rejection and a cancelled context are Ignored. Any other
// error is classified by its gRPC code: Unavailable, DeadlineExceeded, Internal, Unknown and DataLoss are failures,
// every other code is Ignored. An error that carries no status (a plain Go
// error from a handler, which gRPC sends as Unknown) is a Failure, and so are
// context.DeadlineExceeded and a Guard's timeout (sluice.ErrTimeout), even
// one that wraps context.Canceled or an inner Guard's rejection, as
// sluice.DefaultClassifier has them.
func Classify(err error) sluice.Outcome {
	switch {
	case err == nil:
		return sluice.Success
	case errors.Is(err, sluice.ErrRejected), errors.Is(err, sluice.ErrTimeout),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// sluice's and the context's errors, in the Guard's order: a
		// timeout before the cancellation or the rejection it wraps.
		return sluice.DefaultClassifier(err)
	}
	return classifyCode(status.Code(err))
}

// classifyCode says what a gRPC status code tells of the health of what
// returned it: OK is a Success; Unavailable, DeadlineExceeded, Internal,
// Unknown and DataLoss are a Failure; every other code (Canceled,
// InvalidArgument, NotFound, ResourceExhausted, ...) is Ignored.
func classifyCode(code codes.Code) sluice.Outcome {
	switch code {
	case codes.OK:
		return sluice.Success
	case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Unknown, codes.DataLoss:
		return sluice.Failure
	}
	return sluice.Ignored
}

// outcome classifies err with the configured classifier; sluice's own
// rejections are Ignored whatever it says, and a call that returned nil is a
// Success without asking it, as a Guard asks a sluice.Classifier only for
// errors.
func (c *config) outcome(call *sluice.Call, err error) sluice.Outcome {
	if err == nil {
		return sluice.Success
	}
	if c.classify == nil {
		return Classify(err)
	}
	if errors.Is(err, sluice.ErrRejected) {
		return sluice.Ignored
	}
	return core.Classified(call, c.classify, err)
}

// serverOutcome is the outcome of a call this server served, whose context,
// as gRPC gave it to the interceptor, is ctx. A call whose client went away
// (ctx cancelled: the client cancelled the call, reset its stream or closed
// its connection) counts for nothing, whatever the handler returned: its
// Unavailable "transport is closing", or a proxy's answer to a cancelled
// upstream call, says nothing of the server's health. The HTTP adapters
// count a request whose client left the same way. A Guard's call timeout
// ends another context, derived from ctx, and is classified as usual.
func (c *config) serverOutcome(ctx context.Context, call *sluice.Call, err error) sluice.Outcome {
	if errors.Is(ctx.Err(), context.Canceled) {
		return sluice.Ignored
	}
	if err == nil && c.classify == nil {
		return sluice.Success
	}
	return c.outcome(call, err)
}
