package redislimit

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/redistest"
	"github.com/sluice-go/sluice/ratelimit"
)

// The breaker around Redis stays open for its whole open time counted from
// the failure, not from the start of the call that failed: a call that
// timed out opens it until then + openFor, and a decision inside that span
// is answered without going to Redis.
func TestBreakerOpenTimeCountsFromTheFailure(t *testing.T) {
	const timeout, openFor = 300 * time.Millisecond, 400 * time.Millisecond
	s := newServer(t)
	c := newClient(t, s.Addr)
	var log eventLog
	l, err := NewGCRA(c, ratelimit.PerSecond(10), 10, WithName(uniqueName("open-from-failure")),
		WithFailClosed(), WithTimeout(timeout), WithBreaker(1, openFor), WithObserver(log.observe))
	require.NoError(t, err)
	ctx := context.Background()
	d, tk := admitD(l, ctx, monoclock.Now()) // a connection in the pool
	require.True(t, d.Allowed)
	l.Done(tk, sluice.Success, monoclock.Now(), 0)

	require.NoError(t, s.Pause())
	defer func() { require.NoError(t, s.Resume()) }()
	d, _ = admitD(l, ctx, monoclock.Now()) // times out after 300ms and trips the breaker
	require.Equal(t, l.Name()+":closed", d.Policy)
	require.Equal(t, []string{"closed>open"}, log.transitions())
	require.Greater(t, d.RetryAfter, openFor/2, "open for openFor from the failure")
	// 150ms after the failure: past the open time counted from the call's
	// start (400ms after it), within the one counted from the failure.
	time.Sleep(150 * time.Millisecond)
	d, _ = admitD(l, ctx, monoclock.Now())
	require.Equal(t, l.Name()+":closed", d.Policy)
	require.Equal(t, 1, log.count(EventRedisError), "a call went to Redis while the breaker was open")
}

// failClosed's RetryAfter is the open time left of the breaker's latest
// opening, even while another goroutine is still delivering an earlier
// state change to a slow observer.
func TestClosedRetryAfterWhileAChangeIsDelivered(t *testing.T) {
	const openFor = 100 * time.Millisecond
	ms := time.Millisecond
	s := newServer(t)
	c := newClient(t, s.Addr)
	entered, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	observe := func(e Event) {
		if e.Kind == EventStateChange && e.To == "half-open" {
			once.Do(func() { close(entered); <-gate }) // a slow observer
		}
	}
	l, err := NewGCRA(c, ratelimit.PerSecond(10), 10, WithName(uniqueName("retry-delivery")),
		WithFailClosed(), WithTimeout(20*ms), WithBreaker(1, openFor), WithObserver(observe))
	require.NoError(t, err)
	ctx := context.Background()
	s.Stop()
	d, _ := admitD(l, ctx, 0) // fails: open until about 100ms
	require.Equal(t, l.Name()+":closed", d.Policy)
	require.Equal(t, breaker.StateOpen, l.br.b.State())
	var wg sync.WaitGroup
	wg.Go(func() { l.Admit(ctx, 200*ms) }) // half-open; its observer takes its time
	<-entered
	d, _ = admitD(l, ctx, 210*ms) // the probe fails: open again for 100ms
	require.Equal(t, breaker.StateOpen, l.br.b.State())
	d2, _ := admitD(l, ctx, 220*ms)
	close(gate)
	wg.Wait()
	require.Greater(t, d.RetryAfter, 50*ms, "the breaker just reopened for %v", openFor)
	require.Greater(t, d2.RetryAfter, 50*ms, "the breaker is still open")
}

// dropProxy forwards TCP to a Redis node; while armed, it lets a script
// call reach Redis and then closes the client's connection instead of
// passing the reply on, as a reset connection or a failing-over node does.
type dropProxy struct {
	ln      net.Listener
	target  string
	armed   atomic.Bool
	scripts atomic.Int64 // script calls forwarded while armed
	wg      sync.WaitGroup
}

func startDropProxy(t *testing.T, target string) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &dropProxy{ln: ln, target: target}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.serve(c) })
		}
	})
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *dropProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	var drop atomic.Bool
	done := make(chan struct{})
	go func() { // replies: passed on, unless the request is to be dropped
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if drop.Load() {
				_ = c.Close()
				return
			}
			if n > 0 {
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				_ = c.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			low := bytes.ToLower(buf[:n])
			if p.armed.Load() && (bytes.Contains(low, []byte("evalsha")) || bytes.Contains(low, []byte("\r\neval\r\n"))) {
				p.scripts.Add(1)
				drop.Store(true)
			}
			if _, err := s.Write(buf[:n]); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = s.Close()
	<-done
}

// A script whose reply is lost after Redis ran it is not sent again, with
// the clients' default retries (MaxRetries, and a Cluster's MaxRedirects):
// one decision charges the limit once.
func TestScriptNotSentAgainAfterALostReply(t *testing.T) {
	charge := func(t *testing.T, c redis.UniversalClient, p *dropProxy, node func(key string) string) {
		l, err := NewFixedWindow(c, 100, time.Hour, WithName(uniqueName("resend")), WithTimeout(2*time.Second))
		require.NoError(t, err)
		d, tk := admitD(l, sluice.WithKey(context.Background(), "warm"), 0) // loads the script
		require.Equal(t, l.Name(), d.Policy)
		l.Done(tk, sluice.Success, 0, 0)
		ctx := sluice.WithKey(context.Background(), "victim")
		key, _ := l.limits[0].key(ctx)
		p.armed.Store(true)
		d, _ = admitD(l, ctx, 0) // its reply is lost
		p.armed.Store(false)
		require.Equal(t, l.Name()+":open", d.Policy, "decided by the failure policy")
		require.Equal(t, int64(1), p.scripts.Load(), "the script was sent again")
		require.Equal(t, "1", node(key), "one request charged the limit more than once")
	}
	t.Run("client", func(t *testing.T) {
		s := newServer(t)
		p := startDropProxy(t, s.Addr)
		c := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		admin := newClient(t, s.Addr)
		charge(t, c, p, func(key string) string { return admin.HGet(context.Background(), key, "n").Val() })
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 1)
		node := cl.Servers[0]
		p := startDropProxy(t, node.Addr)
		// The node announces the proxy, so the client reaches it only
		// through it.
		_, err := node.Do("CONFIG", "SET", "cluster-announce-port", strconv.Itoa(p.ln.Addr().(*net.TCPAddr).Port))
		require.NoError(t, err)
		_, err = node.Do("CONFIG", "SET", "cluster-announce-ip", "127.0.0.1")
		require.NoError(t, err)
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{p.ln.Addr().String()}, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		charge(t, c, p, func(key string) string {
			v, err := node.Do("HGET", key, "n")
			require.NoError(t, err)
			return v
		})
	})
}
