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
