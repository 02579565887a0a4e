package adaptive

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// queue holds the requests that wait for a slot, under the discipline of
// CoDel with adaptive LIFO: while the queue has been empty within the last
// maxWait, a newcomer may wait up to maxWait and the oldest is served first;
// once it has stayed non-empty for longer (a standing queue, not a burst),
// a newcomer waits at most maxWait/20 and the newest is served first, so the
// requests admitted are fresh and the old ones give up early. Requests
// marked sluice.PriorityCritical are served before the others and always
// wait up to maxWait.
//
// Every instant it uses comes from an Admit: a Done needs none.
type queue struct {
	mu      sync.Mutex
	normal  []*waiter
	crit    []*waiter
	size    int
	maxWait time.Duration
	// since is the instant the queue last turned non-empty; lifo is set once
	// it has stayed so for longer than maxWait, until it empties.
	since    time.Duration
	lifo     bool
	standing bool
	// lastDrop is the instant the last waiter ran out of time: the queue
	// stays in the standing mode through the moments it empties until
	// maxWait has passed without one.
	lastDrop time.Duration
	pool     sync.Pool // of *waiter; per queue, so that its channels stay in one synctest bubble
}

type waiter struct {
	ch      chan struct{}
	granted bool
}

// lifoAfter: once the queue has stayed non-empty for maxWait/lifoAfter,
// the newest waiter is served first, so that a surge's first requests do
// not keep the later ones waiting.
const lifoAfter = 4

// standingWait: in a standing queue a newcomer waits at most
// maxWait/standingWait. Served newest first, the requests admitted there
// hardly wait; the others learn sooner that they will not be.
const standingWait = 4

func (q *queue) len() int { return len(q.normal) + len(q.crit) }

// enqueue adds a waiter that arrived at now, under q.mu, and returns it with
// how long it may wait; nil when the queue is full.
func (q *queue) enqueue(now time.Duration, critical bool) (*waiter, time.Duration) {
	if q.len() >= q.size {
		return nil, 0
	}
	if q.maxWait == 0 {
		// No wait bound: no standing queue to tell from a burst either.
	} else if q.len() == 0 && (!q.standing || now-q.lastDrop > q.maxWait) {
		q.since, q.lifo, q.standing = now, false, false
	} else {
		q.lifo = q.lifo || now-q.since > q.maxWait/lifoAfter
		q.standing = q.standing || now-q.since > q.maxWait
	}
	w, ok := q.pool.Get().(*waiter)
	if !ok {
		w = &waiter{ch: make(chan struct{}, 1)}
	}
	w.granted = false
	wait := q.maxWait
	if critical {
		q.crit = append(q.crit, w)
	} else {
		q.normal = append(q.normal, w)
		if q.standing {
			wait = max(q.maxWait/standingWait, 1)
		}
	}
	return w, wait
}

// next removes the waiter to serve next, under q.mu; nil when none waits.
func (q *queue) next() *waiter {
	var w *waiter
	switch {
	case len(q.crit) > 0:
		w = q.crit[0]
		q.crit[0] = nil
		q.crit = q.crit[1:]
	case len(q.normal) == 0:
		return nil
	case q.lifo:
		w = q.normal[len(q.normal)-1]
		q.normal[len(q.normal)-1] = nil
		q.normal = q.normal[:len(q.normal)-1]
	default:
		w = q.normal[0]
		q.normal[0] = nil
		q.normal = q.normal[1:]
	}
	return w
}

// remove takes w out of the queue, under q.mu.
func (q *queue) remove(w *waiter) {
	for _, s := range []*[]*waiter{&q.normal, &q.crit} {
		for i, x := range *s {
			if x == w {
				copy((*s)[i:], (*s)[i+1:])
				(*s)[len(*s)-1] = nil
				*s = (*s)[:len(*s)-1]
				return
			}
		}
	}
}

// await waits until w is granted a slot, its wait runs out or ctx is done.
// It reports whether the slot came; when it did not, w has left the queue,
// and a slot granted as the wait ended has been handed to release.
func (q *queue) await(ctx context.Context, w *waiter, now, wait time.Duration, waiting *atomic.Int64, release func()) bool {
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	timedOut := false
	select {
	case <-w.ch:
		q.pool.Put(w)
		return true
	case <-ctx.Done():
	case <-timeout:
		timedOut = true
	}
	q.mu.Lock()
	if timedOut {
		q.lastDrop = max(q.lastDrop, now+wait)
	}
	if w.granted {
		// The slot came as the wait ended: take it and give it back.
		q.mu.Unlock()
		<-w.ch
		q.pool.Put(w)
		release()
		return false
	}
	q.remove(w)
	waiting.Add(-1)
	q.mu.Unlock()
	q.pool.Put(w)
	return false
}

// critical reports whether ctx marks its request sluice.PriorityCritical.
func critical(ctx context.Context) bool {
	return sluice.PriorityFrom(ctx) == sluice.PriorityCritical
}
