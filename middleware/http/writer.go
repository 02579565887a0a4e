package sluicehttp

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/middleware/internal/core"
	"github.com/sluice-go/sluice/middleware/internal/routing"
)

// responseWriter records the status a handler answers with (core.Writer,
// which keeps http.Flusher, http.Hijacker, io.ReaderFrom and Unwrap for
// http.ResponseController), holds back a 5xx that a fallback of the
// Guard answers, and notes whether an inner sluice middleware rejected the
// request (its own rejections never count as failures). Writers are
// pooled: the hot path allocates none.
type responseWriter struct {
	core.Writer
	rejected bool
	returned bool // the handler returned: not a panic, not runtime.Goexit
	// view shows the request to the key functions while they run.
	view request
	// h is the middleware serving the request and req the request it
	// admitted (its route and key found from it again), for Reject; req is
	// nil but while the writer serves an admitted request. h outlives the
	// request, so that a middleware's own writers need not store it again.
	h            *handler
	req          *http.Request
	pattern, key string
	cctx         context.Context // the call's context, when the Guard has a timeout
	// fallbackState is set only for a route whose Guard has fallbacks.
	fallbackState
}

// fallbackState is what a writer keeps for the fallbacks of the route's Guard.
// answer is set when they may answer the handler's failure: a 5xx status,
// or nothing written by the Guard's deadline.
type fallbackState struct {
	answer bool
	rt     *routing.Route
	cache  *core.Guard // the route's Guard's stale cache, fed a good GET response
	// addr is the connection's address as the request came, which a
	// middleware inside may rewrite on the request: a stale copy of a
	// client without a key is kept and found under it.
	addr string
	// credentialed: the request, as it came, carried credentials (its
	// answer is kept only when it says public).
	credentialed bool
	// at is the instant, on the Guard's clock, at which a fallback was
	// found to answer the handler's failure: the one it then answers at.
	at time.Duration
}

var writerPool = sync.Pool{New: func() any { return new(responseWriter) }}

func getWriter(w http.ResponseWriter) *responseWriter {
	rw := writerPool.Get().(*responseWriter)
	rw.W = w
	return rw
}

// putWriter returns rw to the pool, zero but for its capture buffer and
// its middleware.
func putWriter(rw *responseWriter) {
	rw.reset()
	writerPool.Put(rw)
}

// reset zeroes rw but for its capture buffer and its middleware, clearing
// only what a request set: zeroing the whole writer costs a write barrier
// per pointer it holds while the collector runs, about a thousand
// instructions a request. view is cleared where it is set.
func (rw *responseWriter) reset() {
	if rw.answer {
		rw.fallbackState = fallbackState{}
	}
	rw.Writer.Reset()
	rw.req = nil
	if rw.pattern != "" {
		rw.pattern = ""
	}
	if rw.key != "" {
		rw.key = ""
	}
	if rw.cctx != nil {
		rw.cctx = nil
	}
	rw.rejected, rw.returned = false, false
}

// WriteHeader records the first final status and passes it on; a 5xx
// that a fallback of the Guard answers is held back, unless it answers a
// rejection (an inner middleware's, or Reject's), which is not the
// handler's failure.
func (rw *responseWriter) WriteHeader(code int) {
	if rw.Held {
		return
	}
	if rw.Status == 0 && code >= 500 && rw.answer && !rw.rejected && rw.declared(code) {
		rw.Status, rw.Held = code, true
		return
	}
	rw.Pass(code)
}

// timedOut reports whether the Guard's deadline for the call has passed,
// its client still there.
func (rw *responseWriter) timedOut() bool {
	return rw.cctx != nil && rw.cctx.Err() == context.DeadlineExceeded && rw.req.Context().Err() == nil
}

// failure returns the error that the handler's answer code is to the
// Guard's fallbacks: a timeout once the Guard's deadline has passed.
func (rw *responseWriter) failure(code int) error {
	if rw.timedOut() {
		return core.TimedOut(code)
	}
	return core.FailedStatus(code)
}

// declared reports whether a fallback of the Guard answers the handler's
// failure, code.
func (rw *responseWriter) declared(code int) bool {
	rw.at = guardhook.Now(rw.rt.Guard)
	return rw.h.Declares(rw.req, rw.rt.Guard, rw.pattern, rw.key, rw.addr, rw.at, rw.failure(code))
}

// markRejected tells the nearest sluice writer around w, if any, that the
// request was rejected by a sluice middleware, so it does not count the
// answer as the handler's failure.
func markRejected(w http.ResponseWriter) {
	if rw := writerIn(w); rw != nil {
		rw.rejected = true
	}
}

// writerIn returns the middleware's writer that w is or wraps (through
// Unwrap, as http.ResponseController follows it), or nil.
func writerIn(w http.ResponseWriter) *responseWriter {
	for i := 0; i < 16 && w != nil; i++ {
		if rw, ok := w.(*responseWriter); ok {
			return rw
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}
