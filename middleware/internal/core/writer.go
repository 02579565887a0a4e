package core

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// Writer is what the net/http and Echo adapters' response writers share:
// it records the first final status a handler writes, drops what it writes
// while a status is held back for a fallback (the adapter holds it, in
// its WriteHeader), keeps the body of a response that may become a stale
// copy, and keeps http.Flusher, http.Hijacker, io.ReaderFrom and
// io.StringWriter of the writer beneath, which Unwrap lets
// http.ResponseController reach.
type Writer struct {
	W        http.ResponseWriter // the writer beneath
	Status   int                 // the first final status written, or held
	Size     int64               // the bytes the writer beneath took
	Held     bool                // Status is held back: the body is dropped
	Hijacked bool
	// Capturing: the body is kept in Capture, up to MaxCapture bytes; a
	// write that failed, or one past MaxCapture, ends it.
	Capturing  bool
	MaxCapture int
	Capture    []byte
}

// Reset makes w ready for another request, keeping its capture buffer up
// to 64 KiB, and writing no pointer it need not (each costs a write
// barrier while the collector runs).
func (w *Writer) Reset() {
	w.W = nil
	w.Status, w.Size, w.Held, w.Hijacked, w.Capturing, w.MaxCapture = 0, 0, false, false, false, 0
	if cap(w.Capture) > 64<<10 {
		w.Capture = nil
	} else if len(w.Capture) > 0 {
		w.Capture = w.Capture[:0]
	}
}

// Header returns the header map of the writer beneath.
func (w *Writer) Header() http.Header { return w.W.Header() }

// Pass records code as the final status if it is the first (a 1xx is
// none, but 101) and writes it beneath.
func (w *Writer) Pass(code int) {
	if w.Status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.Status = code
	}
	w.W.WriteHeader(code)
}

// Write records an implicit 200 and passes the bytes on.
func (w *Writer) Write(b []byte) (int, error) {
	if w.Held {
		return len(b), nil
	}
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	n, err := w.W.Write(b)
	w.Size += int64(n)
	if w.Capturing {
		w.keep(b[:n], err)
	}
	return n, err
}

// WriteString writes s without copying it to a byte slice when the writer
// beneath takes strings, as io.WriteString would on that writer.
func (w *Writer) WriteString(s string) (int, error) {
	if w.Held {
		return len(s), nil
	}
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	var n int
	var err error
	if sw, ok := w.W.(io.StringWriter); ok {
		n, err = sw.WriteString(s)
	} else {
		n, err = w.W.Write([]byte(s))
	}
	w.Size += int64(n)
	if w.Capturing {
		w.keep([]byte(s[:n]), err)
	}
	return n, err
}

// keep adds b, the bytes the writer beneath took, to the capture; a write
// that failed (the client gone, a body past its Content-Length) ends it:
// what the client got is no whole response to keep.
func (w *Writer) keep(b []byte, err error) {
	if err != nil || len(w.Capture)+len(b) > w.MaxCapture {
		w.Capturing = false
		w.Capture = w.Capture[:0]
		return
	}
	w.Capture = append(w.Capture, b...)
}

// Flush sends buffered data to the client, as http.Flusher does.
func (w *Writer) Flush() { _ = w.FlushError() }

// FlushError flushes and reports the writer beneath's error; it is what
// http.ResponseController calls. A status held back is not sent. A flush
// that worked sent the header with an implicit 200; one that failed (a
// writer beneath that cannot flush, such as http.TimeoutHandler's) leaves
// the status to what the handler writes next.
func (w *Writer) FlushError() error {
	if w.Held {
		return nil
	}
	err := http.NewResponseController(w.W).Flush()
	if err == nil && w.Status == 0 {
		w.Status = http.StatusOK
	}
	return err
}

// Hijack hands the connection over, as http.Hijacker does: what happens on
// it is no longer an HTTP response.
func (w *Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.W).Hijack()
	if err == nil {
		w.Hijacked = true
	}
	return c, brw, err
}

// ReadFrom copies from src with the writer beneath's io.ReaderFrom when it
// has one (sendfile on a TCP connection) and no body is being kept.
func (w *Writer) ReadFrom(src io.Reader) (int64, error) {
	if w.Held {
		return io.Copy(io.Discard, src)
	}
	if rf, ok := w.W.(io.ReaderFrom); ok && !w.Capturing {
		n, err := rf.ReadFrom(src)
		if n > 0 && w.Status == 0 {
			w.Status = http.StatusOK // an empty copy sends nothing
		}
		w.Size += n
		return n, err
	}
	return io.Copy(writerOnly{w}, src)
}

// writerOnly hides ReadFrom, so io.Copy does not call it back.
type writerOnly struct{ io.Writer }

// Unwrap returns the writer beneath, for http.ResponseController.
func (w *Writer) Unwrap() http.ResponseWriter { return w.W }
