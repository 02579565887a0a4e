package dashboard

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// A HEAD of api/events answers its headers and returns: its body would go
// nowhere, the writes would never fail, and a client that reuses the
// connection for its next request would never let the request's context
// end (the handler's goroutine would leak, the next request hang).
func TestHeadOfTheEventStreamEnds(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodHead, "/debug/sluice/api/events", nil)
	rec := httptest.NewRecorder()
	start := time.Now()
	f.d.ServeHTTP(rec, req)
	took := time.Since(start)
	assert.Less(t, took, 500*time.Millisecond, "a HEAD of api/events ran as a stream until its context ended")
}

// A graceful shutdown of the server that mounts the dashboard must not
// wait forever for a browser tab that shows the page: the event stream
// must end when its server shuts down.
func TestEventStreamEndsOnServerShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &http.Server{}
		resp, stop := openStream(t, srv)
		defer stop()
		// The client reads the stream, as a browser does.
		go func() {
			br := bufio.NewReader(resp.Body)
			for {
				if _, err := br.ReadString('\n'); err != nil {
					return
				}
			}
		}()
		time.Sleep(2500 * time.Millisecond) // a few snapshots go by

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown with a dashboard page open: %v; want nil (the stream should end with its server)", err)
		}
	})
}

// A server that mounts the dashboard sets WriteTimeout, as hardening
// guides ask: the event stream goes on past it while its client reads
// (each event has its own write deadline).
func TestEventStreamOutlivesTheServersWriteTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		resp, stop := openStream(t, &http.Server{WriteTimeout: 5 * time.Second})
		defer stop()
		events := 0
		br := bufio.NewReader(resp.Body)
		for events < 12 {
			line, err := br.ReadString('\n')
			if err != nil {
				break
			}
			if strings.HasPrefix(line, "event: state") {
				events++
			}
		}
		if events < 12 {
			t.Errorf("the stream ended after %d events (~%ds) with a client reading it; want it to go on past WriteTimeout", events, events)
		}
	})
}

// openStream serves a new Dashboard with srv on an in-memory listener, in
// the synctest bubble, and opens its event stream; stop ends the client
// and the server.
func openStream(t *testing.T, srv *http.Server) (*http.Response, func()) {
	t.Helper()
	d, err := New()
	if err != nil {
		t.Fatal(err)
	}
	srv.Handler = d
	ln := newPipeListener()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	tr := &http.Transport{DialContext: ln.dial}
	reqCtx, cancelReq := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(reqCtx, http.MethodGet, "http://127.0.0.1/debug/sluice/api/events", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, func() {
		cancelReq()
		_ = resp.Body.Close()
		tr.CloseIdleConnections()
		_ = srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}
}

// pipeListener is an in-memory listener: each Dial makes a net.Pipe whose
// server end Accept returns, so that net/http runs inside a synctest bubble.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }
func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A stream that reaches the dashboard after its server's OnShutdown hooks
// ran (its request was read, and was in an outer middleware, when Shutdown
// began) ends at once: Shutdown does not wait for it to its deadline.
func TestAStreamStartedDuringShutdownEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, err := New()
		if err != nil {
			t.Fatal(err)
		}
		shuttingDown := make(chan struct{})
		release := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("late") != "" {
				<-release // an outer middleware still working when Shutdown begins
			}
			d.ServeHTTP(w, r)
		})
		ln := newPipeListener()
		srv := &http.Server{Handler: h}
		srv.RegisterOnShutdown(func() { close(shuttingDown) })
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		tr := &http.Transport{DialContext: ln.dial}
		defer tr.CloseIdleConnections()

		open := func(ctx context.Context, q string) (*http.Response, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1/debug/sluice/api/events"+q, nil)
			return tr.RoundTrip(req)
		}
		reqCtx, cancelReq := context.WithCancel(context.Background())
		defer cancelReq()
		// A first page: its stream registers the server.
		first, err := open(reqCtx, "")
		if err != nil {
			t.Fatal(err)
		}
		firstDone := make(chan struct{})
		go func() {
			defer close(firstDone)
			br := bufio.NewReader(first.Body)
			for {
				if _, err := br.ReadString('\n'); err != nil {
					return
				}
			}
		}()
		// A second page, whose request is under way in the middleware.
		late := make(chan *http.Response, 1)
		go func() {
			resp, err := open(reqCtx, "?late=1")
			if err == nil {
				late <- resp
				br := bufio.NewReader(resp.Body)
				for {
					if _, err := br.ReadString('\n'); err != nil {
						return
					}
				}
			}
		}()
		synctest.Wait()

		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shut := make(chan error, 1)
		go func() { shut <- srv.Shutdown(sctx) }()
		<-shuttingDown
		<-firstDone // the dashboard's hook ran: the first stream ended
		close(release)
		if err := <-shut; err != nil {
			t.Errorf("Shutdown: %v; want nil: a stream that began as the server shut down should end with it", err)
		}
		cancelReq()
		_ = first.Body.Close()
		select {
		case resp := <-late:
			_ = resp.Body.Close()
		default:
		}
		_ = srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
}
