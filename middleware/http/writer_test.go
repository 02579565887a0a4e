package sluicehttp

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

func TestHijackedConnectionWorksThroughMiddleware(t *testing.T) {
	c := testpolicy.NewCounter()
	g := newGuard(t, sluice.SystemClock, c)
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		line, _ := brw.ReadString('\n')
		_, _ = brw.WriteString("echo:" + line)
		_ = brw.Flush()
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	_, err = io.WriteString(conn, "hello\n")
	require.NoError(t, err)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "echo:hello\n", line)
}

func TestHijackerInterfaceKept(t *testing.T) {
	g := newGuard(t, sluice.SystemClock, testpolicy.NewCounter())
	var isHijacker, isFlusher, isReaderFrom bool
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, isHijacker = w.(http.Hijacker)
		_, isFlusher = w.(http.Flusher)
		_, isReaderFrom = w.(io.ReaderFrom)
	}))
	serve(h, http.MethodGet, "/")
	assert.True(t, isHijacker)
	assert.True(t, isFlusher)
	assert.True(t, isReaderFrom)
}

func TestFlushedStreamReachesClientBeforeHandlerEnds(t *testing.T) {
	c := testpolicy.NewCounter()
	g := newGuard(t, sluice.SystemClock, c)
	release := make(chan struct{})
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, "second\n")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "first\n", line)
	close(release)
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.Equal(t, "second\n", string(rest))
}

func TestResponseControllerReachesServerWriter(t *testing.T) {
	g := newGuard(t, sluice.SystemClock, testpolicy.NewCounter())
	errc := make(chan error, 1)
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		rc := http.NewResponseController(w)
		errc <- rc.SetWriteDeadline(time.Now().Add(time.Minute))
		_ = rc.Flush()
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.NoError(t, <-errc)
}

// noFlushWriter is a ResponseWriter that cannot flush, as
// http.TimeoutHandler's is.
type noFlushWriter struct{ rec *httptest.ResponseRecorder }

func (w noFlushWriter) Header() http.Header         { return w.rec.Header() }
func (w noFlushWriter) Write(b []byte) (int, error) { return w.rec.Write(b) }
func (w noFlushWriter) WriteHeader(code int)        { w.rec.WriteHeader(code) }

// A flush sends the header with an implicit 200 only when it works: when
// the writer beneath cannot flush, nothing was sent, and the status the
// handler writes next is the one the client gets and the one classified.
func TestFailedFlushLeavesTheStatusToTheHandler(t *testing.T) {
	c := testpolicy.NewCounter()
	g := newGuard(t, sluice.NewManualClock(0), c)
	var flushErr error
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		flushErr = http.NewResponseController(w).Flush()
		w.WriteHeader(http.StatusInternalServerError)
	}))

	rec := httptest.NewRecorder()
	h.ServeHTTP(noFlushWriter{rec}, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.ErrorIs(t, flushErr, http.ErrNotSupported)
	assert.Equal(t, http.StatusInternalServerError, rec.Code)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, c.Outcomes())

	rec = serve(h, http.MethodGet, "/")
	assert.NoError(t, flushErr)
	assert.Equal(t, http.StatusOK, rec.Code, "the flush sent a 200")
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1, sluice.Success: 1}, c.Outcomes())
}

// hijackable is a ResponseRecorder whose connection can be taken over.
type hijackable struct {
	*httptest.ResponseRecorder
	conn net.Conn
}

func (h hijackable) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return h.conn, bufio.NewReadWriter(bufio.NewReader(h.conn), bufio.NewWriter(h.conn)), nil
}

// A GET whose handler takes the connection over (a WebSocket upgrade) has
// no HTTP response to keep: no stale copy, empty or not, is made of it.
func TestHijackedGetKeepsNoStaleCopy(t *testing.T) {
	sw := openSwitch()
	cache := newStale(t, 8)
	g := guardWith(t, sluice.NewManualClock(time.Hour), sw, cache)
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		if r.URL.Path == "/after-write" {
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n\r\n")
			_ = brw.Flush()
		}
	}))
	for _, path := range []string{"/silent", "/after-write"} {
		client, server := net.Pipe()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Upgrade", "websocket")
		h.ServeHTTP(hijackable{httptest.NewRecorder(), server}, req)
		_ = client.Close()
		assert.Zero(t, cache.Len(), path)
	}

	sw.on = true
	rec := serve(h, http.MethodGet, "/silent")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "answered with an empty stale 200")
}

func TestReadFromRecordsStatus(t *testing.T) {
	c := testpolicy.NewCounter()
	g := newGuard(t, sluice.SystemClock, c)
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.(io.ReaderFrom).ReadFrom(strings.NewReader("payload"))
	}))
	rec := serve(h, http.MethodGet, "/")
	assert.Equal(t, "payload", rec.Body.String())
	assert.Equal(t, map[sluice.Outcome]int{sluice.Success: 1}, c.Outcomes())

	// Over a real connection the server's writer has its own ReadFrom.
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, "payload", string(body))
}

func TestInformationalStatusIsNotFinal(t *testing.T) {
	c := testpolicy.NewCounter()
	g := newGuard(t, sluice.SystemClock, c)
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	serve(h, http.MethodGet, "/")
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, c.Outcomes())
}

func TestHotPathAllocations(t *testing.T) {
	clock := sluice.NewManualClock(0)
	g := newGuard(t, clock, newWindow(t, 1<<30, time.Hour), newBreaker(t, 5, time.Minute))
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	w := &nopWriter{h: http.Header{}}
	// The race detector makes sync.Pool drop a share of what it is given.
	slack := 0.0
	if raceEnabled {
		slack = 1
	}
	allocs := testing.AllocsPerRun(200, func() { h.ServeHTTP(w, req) })
	assert.LessOrEqual(t, allocs, slack)

	quiet := mw(t, WithGuard(g), WithRenderer(middlewareQuiet()))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	allocs = testing.AllocsPerRun(200, func() { quiet.ServeHTTP(w, req) })
	assert.LessOrEqual(t, allocs, slack)
}

// A flood of rejections allocates nothing: a route's problem answer is
// shared while its rejections agree on the cause and the delay.
func TestRejectionAllocatesNothing(t *testing.T) {
	clock := sluice.NewManualClock(0)
	open := newBreaker(t, 1, time.Minute)
	open.ForceOpen()
	for name, p := range map[string]sluice.Policy{
		"open breaker": open,
		"spent limit":  newWindow(t, 1, time.Hour),
		"overloaded":   testpolicy.Reject(sluice.ErrOverloaded, time.Second),
	} {
		h := mw(t, WithGuard(newGuard(t, clock, p)))(statusHandler(http.StatusNoContent))
		serve(h, http.MethodGet, "/") // spends the limit
		rec := serve(h, http.MethodGet, "/")
		require.Contains(t, []int{http.StatusTooManyRequests, http.StatusServiceUnavailable}, rec.Code, name)
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		w := &nopWriter{h: http.Header{}}
		slack := 0.0
		if raceEnabled {
			slack = 1
		}
		assert.LessOrEqual(t, testing.AllocsPerRun(200, func() { h.ServeHTTP(w, req) }), slack, name)
	}
}

// nopWriter is a ResponseWriter that keeps nothing, so that allocation
// counts see only the middleware's.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

func TestWriteStringRecordsStatusAndKeepsStaleCopy(t *testing.T) {
	c := testpolicy.NewCounter()
	g := newGuard(t, sluice.NewManualClock(0), c)
	h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.(io.StringWriter).WriteString("text")
	}))
	rec := serve(h, http.MethodGet, "/")
	assert.Equal(t, "text", rec.Body.String())
	assert.Equal(t, map[sluice.Outcome]int{sluice.Success: 1}, c.Outcomes())
	// A writer without WriteString gets the bytes.
	w := &nopWriter{h: http.Header{}}
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.Equal(t, 2, c.Outcomes()[sluice.Success])
}

// fillFields sets every field of the struct v points to, but those named in
// skip, to a value that is not zero, recursing into embedded structs.
func fillFields(t *testing.T, v reflect.Value, skip ...string) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		sf := v.Type().Field(i)
		if slices.Contains(skip, sf.Name) {
			continue
		}
		f := reflect.NewAt(sf.Type, unsafe.Pointer(v.Field(i).UnsafeAddr())).Elem()
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(7)
		case reflect.String:
			f.SetString("x")
		case reflect.Pointer:
			f.Set(reflect.New(sf.Type.Elem()))
		case reflect.Slice:
			f.Set(reflect.MakeSlice(sf.Type, 3, 8))
		case reflect.Interface:
			var val any
			switch sf.Type {
			case reflect.TypeFor[http.ResponseWriter]():
				val = httptest.NewRecorder()
			case reflect.TypeFor[context.Context]():
				val = context.Background()
			default:
				t.Fatalf("field %s: no value for %s", sf.Name, sf.Type)
			}
			f.Set(reflect.ValueOf(val))
		case reflect.Struct:
			fillFields(t, f)
		default:
			t.Fatalf("field %s: no value for kind %s", sf.Name, f.Kind())
		}
	}
}

// TestWriterResetLeavesNothing keeps the pooled writer's reset, which
// clears field by field, in step with the fields: a writer that served any
// request, with or without the fallbacks' state, goes back zero but for its
// emptied capture buffer and its middleware.
func TestWriterResetLeavesNothing(t *testing.T) {
	for _, fallbacks := range []bool{false, true} {
		rw := new(responseWriter)
		skip := []string{"view"} // cleared where it is set
		if !fallbacks {
			skip = append(skip, "fallbackState")
		}
		fillFields(t, reflect.ValueOf(rw).Elem(), skip...)
		rw.reset()
		require.Len(t, rw.Capture, 0)
		require.Equal(t, 8, cap(rw.Capture), "the capture buffer is kept")
		rw.Capture = nil
		require.NotNil(t, rw.h, "the middleware is kept")
		rw.h = nil
		require.True(t, reflect.ValueOf(rw).Elem().IsZero(), "fallbacks %v: %+v", fallbacks, *rw)
	}
}

// A flood of rejections a handler passes to Reject (every request meeting
// its dependency's open breaker: an outage) allocates nothing: the route
// keeps their problem answer, as it does for its own Guard's.
func TestHandlerRejectionAllocatesNothing(t *testing.T) {
	clock := sluice.NewManualClock(0)
	open := newBreaker(t, 1, time.Minute)
	open.ForceOpen()
	dep := newGuard(t, clock, open)
	route := newGuard(t, clock, newWindow(t, 1<<30, time.Hour))
	h := mw(t, WithGuard(route))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := dep.Do(r.Context(), func(context.Context) error { return nil })
		if !Reject(w, r, err) {
			panic(err)
		}
	}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	w := &nopWriter{h: http.Header{}}
	h.ServeHTTP(w, req)
	slack := 0.0
	if raceEnabled {
		slack = 1
	}
	assert.LessOrEqual(t, testing.AllocsPerRun(200, func() { h.ServeHTTP(w, req) }), slack)
}
