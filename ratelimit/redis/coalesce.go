package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// Coalescing: a key has at most maxFlights calls to Redis in flight. The
// admissions of the key that arrive while it has that many do not each send
// their own: they queue, and when a call returns, the first of them sends
// one call for the queue (up to maxBatch requests), which the batch script
// of the algorithm decides in queue order, as that many one-request calls
// would at that instant. A hot key (a route's limit shared by a fleet) then
// costs Redis one script run, and the client one round trip, per batch
// instead of per request; a key with fewer concurrent requests goes to Redis
// at once, as without coalescing.
//
// A queued request waits at most its own timeout: its batch's deadline is
// that of the batch's oldest request, which arrived first, and a request
// still queued when its timeout passes leaves the queue for its failure
// policy.
//
// The breaker around Redis counts calls, not the requests they carry: the
// sender of a call reports its outcome with its own ticket, and the other
// requests of its batch report a success as theirs but end their tickets
// unjudged when it fails, so one lost batch call is one failure, as one
// lost call of a request alone is. A request whose timeout passes while it
// is still queued counts as a failed call of its own: the calls ahead of it
// took that long.

// maxFlights is how many calls one key may have in flight before its
// admissions queue. At or below it, coalescing costs nothing: 8 callers on
// one key on 2 cores decide as fast as without it (12.5 µs a decision
// against 12.4). Above it the queue pays: 16 callers 8.5 µs against 11.5,
// 64 callers 3.6 µs against 11.9 (bench/: RedisParallel8, RedisParallel64,
// and the same with 16 callers). A lower bound
// queues requests that a call of their own would have served sooner: at 8
// callers, 4 flights cost 16 µs a decision and one flight 22, as a round
// trip on loopback takes tens of microseconds however little it carries.
const maxFlights = 8

// maxBatch is the most requests one batch call decides.
const maxBatch = 64

// maxFreeLanes is how many lanes of keys with no call in flight a shard
// keeps for reuse; the rest, and lanes whose queue grew past maxBatch, go
// to the collector, so a moment with many keys in flight, or a long queue,
// leaves no memory behind.
const maxFreeLanes = 16

// laneShards is the number of locks the lanes of a Limiter are spread over,
// by the hash of their key.
const laneShards = 32

// laneShard maps each key with a call in flight to its lane.
type laneShard struct {
	mu   sync.Mutex
	m    map[string]*lane
	free []*lane // lanes of keys with no call in flight, for reuse
	_    [16]byte
}

// lane is the state of one key with calls in flight: how many, and the
// requests that wait for one of them to return.
type lane struct {
	flights int
	q       []*waiter
}

// waiter is a request going to Redis through its key's lane, pooled.
type waiter struct {
	ctx   context.Context
	c     *call
	now   time.Duration
	ep    *deadlineEpoch
	bt    sluice.Ticket // of the breaker around Redis
	state atomic.Int32  // waitQueued, waitLeading, waitSent, waitDecided or waitAbandoned
	wake  chan struct{} // told once: the decision is in c, or the waiter leads batch
	batch []*waiter     // the requests this waiter sends, itself first
	args  []any
	cctx  callCtx
	err   error // the call's failure, or nil when c.ds holds the decision
}

// A queued waiter's state moves once, from waitQueued: to waitLeading or
// waitSent (in the batch of the call the leader sends) by the request that
// sends the call before, or to waitAbandoned by the waiter itself when its
// timeout passes first. A sent one moves on to waitDecided when its batch's
// call is answered or lost: it waits for that, as the call, bounded by the
// leader's deadline (no later than its own), is one call, and its loss one
// failure. The sender frees an abandoned waiter and its call.
const (
	waitQueued int32 = iota
	waitLeading
	waitSent
	waitDecided
	waitAbandoned
)

// errQueueTimeout is the failure of a request whose timeout passed while it
// waited for the call in flight for its key.
var errQueueTimeout = fmt.Errorf("redislimit: timed out waiting behind a call for the same key: %w", context.DeadlineExceeded)

// errLeaderPanicked is the failure of the requests of a batch whose sender
// panicked before Redis answered (in a go-redis hook, say).
var errLeaderPanicked = errors.New("redislimit: the call of this request's batch panicked")

func (l *Limiter) getWaiter() *waiter { return l.waiters.Get().(*waiter) }

func (l *Limiter) putWaiter(w *waiter) {
	clear(w.batch)
	clear(w.args)
	w.ctx, w.c, w.ep, w.err, w.bt = nil, nil, nil, nil, 0
	w.batch, w.args = w.batch[:0], w.args[:0]
	w.state.Store(waitQueued)
	l.waiters.Put(w)
}

// admitCoalesced decides c's request, of a limiter with one limit, through
// the lane of its key: at once when fewer than maxFlights calls for the key
// are in flight, else with the requests that queue behind those calls. Each
// request holds its own ticket of the breaker around Redis; the sender of a
// call reports the call's outcome with its ticket, and the other requests
// of its batch only a success (see above).
func (l *Limiter) admitCoalesced(ctx context.Context, c *call, cost int64, now time.Duration) (sluice.Decision, sluice.Ticket) {
	bt, ok := l.br.acquire(now)
	if !ok {
		return l.fallback(ctx, c, now)
	}
	w := l.getWaiter()
	w.ctx, w.c, w.now, w.ep, w.bt = ctx, c, now, l.deadlines.get(), bt
	ep := w.ep
	key, tag := c.keys[0], c.tags[0]
	sh := &l.lanes[tag%laneShards]
	sh.mu.Lock()
	ln := sh.m[key]
	if ln == nil {
		if n := len(sh.free); n > 0 {
			ln, sh.free = sh.free[n-1], sh.free[:n-1]
		} else {
			ln = &lane{}
		}
		sh.m[key] = ln
	}
	sent := false // the request sent its batch's call
	if ln.flights < maxFlights {
		ln.flights++
		sh.mu.Unlock()
		w.state.Store(waitLeading)
		w.batch = append(w.batch, w)
		sent = true
		l.send(sh, key, w.batch)
	} else {
		ln.q = append(ln.q, w)
		sh.mu.Unlock()
		select {
		case <-w.wake:
		case <-ep.done:
			if w.state.CompareAndSwap(waitQueued, waitAbandoned) {
				// The request's sender frees w and c (from now on, they
				// are not to be touched); the failure policy decides with
				// a call of its own.
				c2 := l.getCall()
				c2.keys[0], c2.tags[0] = key, tag
				at := failedAt(now, ep)
				l.br.failure(bt, at)
				return l.failed(ctx, c2, now, at, errQueueTimeout)
			}
			<-w.wake // leading, or sent and to be decided: the wake comes
		}
		if w.state.Load() == waitLeading {
			sent = true
			l.send(sh, key, w.batch)
		}
	}
	err := w.err
	l.putWaiter(w)
	if err != nil {
		at := failedAt(now, ep)
		if sent {
			l.br.failure(bt, at)
		} else {
			// The call's sender reports its failure, once; a panic's is
			// not Redis's failure.
			l.br.ignore(bt, at)
		}
		return l.failed(ctx, c, now, at, err)
	}
	l.br.success(bt, now)
	return l.decided(c, cost, now)
}

// send makes the call for batch, whose first request is the caller's own,
// leaves each request's decision (or the failure) in it, wakes the others
// and hands the lane on. The requests of the batch are woken even when the
// call panics, and the caller's ticket of the breaker then ends unjudged,
// so that a half-open breaker's probe slot is given back.
func (l *Limiter) send(sh *laneShard, key string, batch []*waiter) {
	settled := false
	defer func() {
		if !settled {
			for _, w := range batch {
				w.err = errLeaderPanicked
			}
			lead := batch[0]
			l.br.ignore(lead.bt, failedAt(lead.now, lead.ep))
			l.release(sh, key, batch)
		}
	}()
	m := l.limits[0]
	lead := batch[0]
	lead.cctx = callCtx{parent: lead.ctx, ep: lead.ep}
	var reply string
	var err error
	if len(batch) == 1 {
		reply, err = m.single.Run(&lead.cctx, l.client, lead.c.keys, lead.c.args[2:5]...).Text()
		if err == nil {
			err = parseReply(reply, lead.c.ds, lead.c.marks)
		}
	} else {
		lead.args = append(lead.args[:0], lead.c.args[2], lead.c.args[3]) // the lead's period and quota
		for _, w := range batch {
			lead.args = append(lead.args, w.c.args[4]) // the cost, boxed
		}
		reply, err = m.batch.Run(&lead.cctx, l.client, lead.c.keys, lead.args...).Text()
		if err == nil {
			err = parseBatch(reply, batch)
		}
		for _, w := range batch[1:] {
			// Decided under the lead's numbers, which a SetLimit since a
			// waiter queued may have changed: its negative-cache entry and
			// its refund go by those.
			w.c.args[2], w.c.args[3] = lead.c.args[2], lead.c.args[3]
		}
	}
	lead.cctx = callCtx{}
	for _, w := range batch {
		w.err = err
	}
	settled = true
	l.release(sh, key, batch)
}

// parseBatch reads the decision of each request of batch from the batch
// script's reply.
func parseBatch(s string, batch []*waiter) error {
	r := replyReader{s: s}
	for _, w := range batch {
		var ok bool
		if w.c.ds[0], w.c.marks[0], ok = r.decision(); !ok {
			return errReply
		}
	}
	if !r.end() {
		return errReply
	}
	return nil
}

// release wakes the requests of batch but its first, whose decisions are
// in, and passes the call's flight to the oldest request queued for the key,
// with up to maxBatch requests to send; with none queued, the flight ends.
// Requests that gave up waiting are freed and left out.
func (l *Limiter) release(sh *laneShard, key string, batch []*waiter) {
	for _, w := range batch[1:] {
		if w.state.CompareAndSwap(waitSent, waitDecided) {
			w.wake <- struct{}{}
		} else {
			l.free(w)
		}
	}
	sh.mu.Lock()
	ln := sh.m[key]
	// The first queued request that still waits leads; the ones before it
	// gave up.
	var next *waiter
	i := 0
	for ; i < len(ln.q); i++ {
		if w := ln.q[i]; w.state.CompareAndSwap(waitQueued, waitLeading) {
			next = w
			break
		}
		l.free(ln.q[i])
	}
	if next != nil {
		// It sends the requests queued after it that still wait, up to
		// maxBatch in all; the ones among them that gave up are freed, not
		// sent to be charged for nothing.
		next.batch = append(next.batch[:0], next)
		for i++; i < len(ln.q) && len(next.batch) < maxBatch; i++ {
			if w := ln.q[i]; w.state.CompareAndSwap(waitQueued, waitSent) {
				next.batch = append(next.batch, w)
			} else {
				l.free(w)
			}
		}
	}
	left := copy(ln.q, ln.q[i:])
	clear(ln.q[left:])
	ln.q = ln.q[:left]
	if next == nil {
		ln.flights--
		if ln.flights == 0 {
			delete(sh.m, key)
			if len(sh.free) < maxFreeLanes && cap(ln.q) <= maxBatch {
				sh.free = append(sh.free, ln)
			}
		}
	}
	sh.mu.Unlock()
	if next != nil {
		next.wake <- struct{}{}
	}
}

// free returns a waiter that gave up, and its call, to their pools.
func (l *Limiter) free(w *waiter) {
	l.putCall(w.c)
	l.putWaiter(w)
}
