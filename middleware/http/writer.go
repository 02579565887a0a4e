package sluicehttp

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/middleware/internal/core"
	"github.com/sluice-go/sluice/middleware/internal/routing"
)

// responseWriter records the status a handler answers with, and whether an
// inner sluice middleware rejected the request (its own rejections never
// count as failures). It keeps http.Flusher, http.Hijacker and io.ReaderFrom,
// and Unwrap lets http.ResponseController reach the writer beneath. Writers
// are pooled: the hot path allocates none.
type responseWriter struct {
	w        http.ResponseWriter
	status   int
	rejected bool
	hijacked bool
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
// or nothing written by the Guard's deadline. held is set once a 5xx is
// held back for one; the handler's body is then dropped.
type fallbackState struct {
	answer, held bool
	// capture, when capturing, collects the body of a response that may be
	// kept as a stale copy; it is dropped when the body outgrows maxCapture.
	capture    []byte
	maxCapture int
	capturing  bool
	rt         *routing.Route
	cache      *core.Guard // the route's Guard's stale cache, fed a good GET response
	// addr is the connection's address as the request came, which a
	// middleware inside may rewrite on the request: a stale copy of a
	// client without a key is kept and found under it.
	addr string
	// at is the instant, on the Guard's clock, at which a fallback was
	// found to answer the handler's failure: the one it then answers at.
	at time.Duration
}

var writerPool = sync.Pool{New: func() any { return new(responseWriter) }}

func getWriter(w http.ResponseWriter) *responseWriter {
	rw := writerPool.Get().(*responseWriter)
	rw.w = w
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
		capture := rw.capture[:0]
		if cap(capture) > 64<<10 {
			capture = nil
		}
		rw.fallbackState = fallbackState{capture: capture}
	}
	rw.w, rw.req = nil, nil
	if rw.pattern != "" {
		rw.pattern = ""
	}
	if rw.key != "" {
		rw.key = ""
	}
	if rw.cctx != nil {
		rw.cctx = nil
	}
	rw.status, rw.rejected, rw.hijacked, rw.returned = 0, false, false, false
}

// Header returns the header map of the writer beneath.
func (rw *responseWriter) Header() http.Header { return rw.w.Header() }

// WriteHeader records the first final status and passes it on; a 5xx
// that a fallback of the Guard answers is held back, unless it answers a
// rejection (an inner middleware's, or Reject's), which is not the
// handler's failure.
func (rw *responseWriter) WriteHeader(code int) {
	if rw.held {
		return
	}
	if rw.status == 0 && code >= 500 && rw.answer && !rw.rejected && rw.declared(code) {
		rw.status, rw.held = code, true
		return
	}
	if rw.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		rw.status = code
	}
	rw.w.WriteHeader(code)
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

// Write records an implicit 200 and passes the bytes on.
func (rw *responseWriter) Write(b []byte) (int, error) {
	if rw.held {
		return len(b), nil
	}
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	n, err := rw.w.Write(b)
	if rw.capturing {
		rw.keep(b[:n], err)
	}
	return n, err
}

// WriteString writes s without copying it to a byte slice when the writer
// beneath takes strings, as io.WriteString would on that writer.
func (rw *responseWriter) WriteString(s string) (int, error) {
	if rw.held {
		return len(s), nil
	}
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	var n int
	var err error
	if sw, ok := rw.w.(io.StringWriter); ok {
		n, err = sw.WriteString(s)
	} else {
		n, err = rw.w.Write([]byte(s))
	}
	if rw.capturing {
		rw.keep([]byte(s[:n]), err)
	}
	return n, err
}

// keep adds b, the bytes the writer beneath took, to the capture; a write
// that failed (the client gone, a body past its Content-Length) ends it:
// what the client got is no whole response to keep.
func (rw *responseWriter) keep(b []byte, err error) {
	if err != nil || len(rw.capture)+len(b) > rw.maxCapture {
		rw.capturing = false
		rw.capture = rw.capture[:0]
		return
	}
	rw.capture = append(rw.capture, b...)
}

// Flush sends buffered data to the client, as http.Flusher does.
func (rw *responseWriter) Flush() { _ = rw.FlushError() }

// FlushError flushes and reports the writer beneath's error; it is what
// http.ResponseController calls. A flush that worked sent the header with
// an implicit 200; one that failed (a writer beneath that cannot flush, such
// as http.TimeoutHandler's) leaves the status to what the handler writes
// next.
func (rw *responseWriter) FlushError() error {
	if rw.held {
		return nil
	}
	err := http.NewResponseController(rw.w).Flush()
	if err == nil && rw.status == 0 {
		rw.status = http.StatusOK
	}
	return err
}

// Hijack hands the connection over, as http.Hijacker does. After it, the
// request counts as a success: what happens on the connection is no longer
// HTTP.
func (rw *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(rw.w).Hijack()
	if err == nil {
		rw.hijacked = true
	}
	return c, brw, err
}

// ReadFrom copies from src with the writer beneath's io.ReaderFrom when it
// has one (sendfile on a TCP connection).
func (rw *responseWriter) ReadFrom(src io.Reader) (int64, error) {
	if rw.held {
		return io.Copy(io.Discard, src)
	}
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	if rf, ok := rw.w.(io.ReaderFrom); ok && !rw.capturing {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{rw}, src)
}

// writerOnly hides ReadFrom, so io.Copy does not call it back.
type writerOnly struct{ io.Writer }

// Unwrap returns the writer beneath, for http.ResponseController.
func (rw *responseWriter) Unwrap() http.ResponseWriter { return rw.w }

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
