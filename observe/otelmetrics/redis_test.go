package otelmetrics_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
)

// stalled listens on loopback and accepts every connection, reads what it
// is sent and never answers: a Redis that hangs, the timeout an operator
// most wants to see.
func stalled(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// A Redis that accepts the connection and never answers times out on the
// connection's read deadline (go-redis with ContextTimeoutEnabled puts the
// limiter's deadline on the socket): an i/o timeout, not
// context.DeadlineExceeded, which sluice.redis.errors counts as a timeout
// all the same.
func TestStalledRedisCountsAsATimeout(t *testing.T) {
	m, reader := newReader(t)
	client := redis.NewClient(&redis.Options{Addr: stalled(t), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	l, err := redislimit.NewGCRA(client, ratelimit.PerSecond(10), 10, redislimit.WithName("redis/stalled"),
		redislimit.WithTimeout(50*time.Millisecond), redislimit.WithBreaker(100, time.Minute),
		redislimit.WithObserver(m.ObserveRedis))
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(l))
	require.NoError(t, err)
	for range 2 {
		_ = g.Do(sluice.WithKey(t.Context(), "user"), func(context.Context) error { return nil })
	}
	require.NoError(t, g.Close())
	assert.Equal(t, map[string]float64{
		"error.type=timeout,sluice.policy=redis/stalled": 2,
	}, points(t, reader, "sluice.redis.errors"))
}
