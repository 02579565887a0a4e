package redislimit

import (
	"context"
	"sync/atomic"
	"time"
)

// callCtx is the context of one call to Redis: the request's values, and the
// limiter's deadline instead of the request's deadline and cancellation (a
// decision is owed either way; the timeout bounds it). go-redis, with
// ContextTimeoutEnabled, puts the deadline on the connection's reads and
// writes, and gives up dialling or waiting for a free connection when Done is
// closed.
//
// Calls starting within one grain share the deadline and the Done channel of
// a deadline epoch, so a decision allocates no context, timer or channel of
// its own: its deadline is between timeout-grain and timeout after it starts.
type callCtx struct {
	parent context.Context
	ep     *deadlineEpoch
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.ep.deadline, true }
func (c *callCtx) Done() <-chan struct{}       { return c.ep.done }
func (c *callCtx) Value(key any) any           { return c.parent.Value(key) }
func (c *callCtx) Err() error {
	select {
	case <-c.ep.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// deadlineEpoch is the deadline shared by the calls that start within one
// grain after start.
type deadlineEpoch struct {
	start, deadline time.Time
	done            chan struct{}
}

// epochs hands out the current deadline epoch, starting a new one (and the
// timer that closes its channel) when the current one is a grain old.
type epochs struct {
	cur            atomic.Pointer[deadlineEpoch]
	timeout, grain time.Duration
}

func newEpochs(timeout time.Duration) *epochs {
	return &epochs{timeout: timeout, grain: max(timeout/16, time.Microsecond)}
}

func (e *epochs) get() *deadlineEpoch {
	now := time.Now()
	ep := e.cur.Load()
	if ep != nil && now.Sub(ep.start) < e.grain {
		return ep
	}
	n := &deadlineEpoch{start: now, deadline: now.Add(e.timeout), done: make(chan struct{})}
	if !e.cur.CompareAndSwap(ep, n) {
		if cur := e.cur.Load(); cur != nil {
			return cur
		}
	}
	time.AfterFunc(e.timeout, func() { close(n.done) })
	return n
}
