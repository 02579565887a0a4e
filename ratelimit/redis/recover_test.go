package redislimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replyError is an error reply of Redis, as go-redis reports it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestTopologyMoved(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{refused, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{io.EOF, true},
		{context.DeadlineExceeded, true},
		{errQueueTimeout, true},
		{replyError("CLUSTERDOWN The cluster is down"), true},
		{replyError("CLUSTERDOWN Hash slot not served"), true},
		{replyError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{replyError("MOVED 3999 127.0.0.1:6381"), true},
		{replyError("ASK 3999 127.0.0.1:6381"), true},
		{replyError("LOADING Redis is loading the dataset in memory"), true},
		{replyError("READONLY You can't write against a read only replica."), true},
		{replyError("MASTERDOWN Link with MASTER is down"), true},
		{fmt.Errorf("wrapped: %w", replyError("TRYAGAIN x")), true},
		{replyError("ERR Error running script: bad argument"), false},
		{replyError("NOSCRIPT No matching script"), false},
		{errReply, false},
		{ErrCrossSlot, false},
		{errLeaderPanicked, false},
	} {
		assert.Equal(t, c.want, topologyMoved(c.err), "%v", c.err)
	}
}

// countingReloader counts the reloads asked of it.
type countingReloader struct{ n atomic.Int64 }

func (r *countingReloader) ReloadState(context.Context) { r.n.Add(1) }

func TestTopologyReloadsAtMostOncePerInterval(t *testing.T) {
	r := &countingReloader{}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var now int64
	top := &topology{client: r, now: func() int64 { return now }}
	moved := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, step := range []struct {
		at   time.Duration
		err  error
		want int64 // reloads so far
	}{
		{0, moved, 1},
		{time.Millisecond, moved, 1},
		{reloadEvery - time.Nanosecond, moved, 1},
		{reloadEvery, replyError("ERR script"), 1}, // not a move
		{reloadEvery, moved, 2},
		{reloadEvery + 100*time.Millisecond, replyError("CLUSTERDOWN"), 2},
		{2*reloadEvery + time.Millisecond, replyError("CLUSTERDOWN"), 3},
	} {
		now = base + int64(step.at)
		top.failed(step.err)
		require.Equal(t, step.want, r.n.Load(), "at %v after %v", step.at, step.err)
	}
}

func TestTopologyReloadsBeforeTheBreakersProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &countingReloader{}
		top := &topology{client: r, now: func() int64 { return time.Now().UnixNano() }}
		top.breakerChanged("open", time.Second)
		time.Sleep(time.Second - reloadLead - time.Millisecond)
		synctest.Wait()
		require.Zero(t, r.n.Load(), "reloaded long before the probe")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.EqualValues(t, 1, r.n.Load(), "no reload before the probe")
		// The half-open probe follows: that reload was just made.
		time.Sleep(reloadLead)
		top.breakerChanged("half-open", time.Second)
		require.EqualValues(t, 1, r.n.Load())
		// A probe whose breaker opened long ago reloads when it goes.
		time.Sleep(reloadEvery)
		top.breakerChanged("half-open", time.Second)
		require.EqualValues(t, 2, r.n.Load())
		top.breakerChanged("closed", time.Second)
		require.EqualValues(t, 2, r.n.Load())
	})
}

func TestTopologyOnlyForClusterClients(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	assert.Nil(t, newTopology(c))
	f := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	defer f.Close()
	assert.Nil(t, newTopology(f))
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	assert.NotNil(t, newTopology(cc))
	u := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}})
	defer u.Close()
	assert.NotNil(t, newTopology(u))
	var nilTop *topology
	nilTop.failed(errors.New("x")) // a nil topology does nothing
	nilTop.breakerChanged("open", time.Second)
}
