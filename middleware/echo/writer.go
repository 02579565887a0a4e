package sluiceecho

import (
	"context"
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
// Guard's stale caches (core.Writer). Writers are pooled: a request
// allocates none.
type writer struct {
	core.Writer

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
	// failed is the handler's error that Echo's error handler renders,
	// once the Guard's fallbacks were found to answer it: a 5xx rendered
	// of it is held, and answered for it.
	failed error
	// credentialed: the request, as it came, carried credentials (its
	// answer is kept only when it says public).
	credentialed bool
}

var writerPool = sync.Pool{New: func() any { return new(writer) }}

func getWriter(w http.ResponseWriter) *writer {
	wr := writerPool.Get().(*writer)
	wr.W = w
	return wr
}

// putWriter returns w to the pool, zero but for its capture buffer.
func putWriter(w *writer) {
	if w.cfg != nil || w.cctx != nil { // set for the fallbacks, or a timeout
		keep := w.Writer
		keep.Reset()
		*w = writer{Writer: keep}
	} else {
		w.Writer.Reset()
	}
	writerPool.Put(w)
}

// WriteHeader records the first final status and passes it on; a 5xx that
// a fallback of the Guard answers is held back, unless it answers a
// rejection (an inner sluice middleware's), which is not the handler's
// failure.
func (w *writer) WriteHeader(code int) {
	if w.Held {
		return
	}
	if w.Status == 0 && code >= 500 && w.answer && w.holds(code) {
		w.Status, w.Held = code, true
		w.Capturing, w.Capture = false, w.Capture[:0]
		return
	}
	w.Pass(code)
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

// tell tells res the status the client got, which Echo's Response does not
// know when it was written past it, to c.Response().Writer (a body written
// through it after commits the default 200).
func (w *writer) tell(res *echo.Response) {
	if w.Status != 0 {
		res.Status = w.Status
		if !res.Committed {
			res.Committed, res.Size = true, w.Size
		}
	}
}

// failure returns the error that the answer code is to the Guard's
// fallbacks: a timeout once the Guard's deadline has passed, its client
// still there.
func (w *writer) failure(code int) error {
	if w.failed != nil && code >= 500 {
		return w.failed
	}
	if w.cctx != nil && w.cctx.Err() == context.DeadlineExceeded && w.reqCtx.Err() == nil {
		return core.TimedOut(code)
	}
	return core.FailedStatus(code)
}
