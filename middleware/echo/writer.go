package sluiceecho

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/middleware/internal/core"
	"github.com/sluice-go/sluice/middleware/internal/routing"
)

// writer is what the middleware puts under c.Response() for a request it
// admitted. It records the first status the handler answers with, through
// c.Response() or past it (c.Response().Writer), which Echo's Response
// would not see; holds back a 5xx that a fallback of the Guard answers, as
// the net/http adapter does; and keeps the body of a GET response for the
// Guard's stale caches, up to max bytes. Writers are pooled: a request
// allocates none.
type writer struct {
	http.ResponseWriter
	status   int   // the first final status written, or held
	size     int64 // bytes the writer beneath took
	held     bool  // status is held back for a fallback; the body is dropped
	hijacked bool
	// capturing: the body is kept in body, up to max bytes; it stops on a
	// failed write or past max.
	capturing bool
	body      []byte
	max       int

	// Set when the route's Guard has fallbacks, for the 5xx they answer.
	answer bool
	cfg    *config
	c      echo.Context
	rt     *routing.Route
	asked  *http.Request   // the request as it came
	reqCtx context.Context // its own context
	cctx   context.Context // the call's, when the Guard has a timeout
	key    string
	addr   string
	at     time.Duration // when a fallback was found to answer the 5xx held
}

var writerPool = sync.Pool{New: func() any { return new(writer) }}

func getWriter(w http.ResponseWriter) *writer {
	wr := writerPool.Get().(*writer)
	wr.ResponseWriter = w
	return wr
}

// putWriter returns w to the pool, zero but for its capture buffer.
func putWriter(w *writer) {
	body := w.body[:0]
	if cap(body) > 64<<10 {
		body = nil
	}
	if w.cfg != nil || w.cctx != nil { // set for the fallbacks, or a timeout
		*w = writer{body: body}
	} else {
		w.ResponseWriter, w.body = nil, body
		w.status, w.size, w.held, w.hijacked = 0, 0, false, false
	}
	writerPool.Put(w)
}

// WriteHeader records the first final status and passes it on; a 5xx that
// a fallback of the Guard answers is held back, unless it answers a
// rejection (an inner sluice middleware's), which is not the handler's
// failure.
func (w *writer) WriteHeader(code int) {
	if w.held {
		return
	}
	if w.status == 0 && code >= 500 && w.answer && w.holds(code) {
		w.status, w.held = code, true
		w.capturing, w.body = false, w.body[:0]
		return
	}
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// holds reports whether the handler's answer code is a failure that a
// fallback of the Guard answers, noting when it was found to.
func (w *writer) holds(code int) bool {
	if w.c.Get(rejectedKey) != nil || routing.IsRejection(w.Header()) || w.reqCtx.Err() != nil {
		return false
	}
	w.at = guardhook.Now(w.rt.Guard)
	return w.cfg.Declares(w.asked, w.rt.Guard, routeOf(w.c, w.rt), w.key, w.addr, w.at, w.failure(code))
}

// failure returns the error that the answer code is to the Guard's
// fallbacks: a timeout once the Guard's deadline has passed, its client
// still there.
func (w *writer) failure(code int) error {
	if w.cctx != nil && w.cctx.Err() == context.DeadlineExceeded && w.reqCtx.Err() == nil {
		return core.TimedOut(code)
	}
	return core.FailedStatus(code)
}

// Write records an implicit 200, passes the bytes on and keeps what the
// writer beneath took; a write that failed ends the capture: what the
// client got is no whole response.
func (w *writer) Write(b []byte) (int, error) {
	if w.held {
		return len(b), nil
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.size += int64(n)
	if w.capturing {
		if err != nil || len(w.body)+n > w.max {
			w.capturing, w.body = false, w.body[:0]
		} else {
			w.body = append(w.body, b[:n]...)
		}
	}
	return n, err
}

// WriteString writes s as Write does, without copying it to a byte slice
// when the writer beneath takes strings and no body is being kept.
func (w *writer) WriteString(s string) (int, error) {
	sw, ok := w.ResponseWriter.(io.StringWriter)
	if !ok || w.held || w.capturing {
		return w.Write([]byte(s))
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := sw.WriteString(s)
	w.size += int64(n)
	return n, err
}

// ReadFrom copies from src with the writer beneath's io.ReaderFrom when it
// has one (sendfile on a TCP connection) and no body is being kept.
func (w *writer) ReadFrom(src io.Reader) (int64, error) {
	if w.held {
		return io.Copy(io.Discard, src)
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok && !w.capturing {
		if w.status == 0 {
			w.status = http.StatusOK
		}
		n, err := rf.ReadFrom(src)
		w.size += n
		return n, err
	}
	return io.Copy(writerOnly{w}, src)
}

// writerOnly hides ReadFrom, so io.Copy does not call it back.
type writerOnly struct{ io.Writer }

// FlushError flushes and reports the writer beneath's error, as
// http.ResponseController asks; a status held back is not sent. A flush
// that worked sent the header with an implicit 200.
func (w *writer) FlushError() error {
	if w.held {
		return nil
	}
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err == nil && w.status == 0 {
		w.status = http.StatusOK
	}
	return err
}

// Flush flushes as http.Flusher does.
func (w *writer) Flush() { _ = w.FlushError() }

// Hijack hands the connection to the handler (a WebSocket upgrade, say),
// noting that the response is none to keep.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
	}
	return conn, rw, err
}

// Unwrap returns the writer beneath, for http.ResponseController.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
