package adaptive

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// queue holds the requests that wait for a slot, under the discipline of
// CoDel with adaptive LIFO. A burst is held in arrival order, each request
// up to maxWait. The queue is overloaded when more requests entered it than
// left it for a slot, over the last maxWait or the one before, by a quarter
// of what the slots serve in a maxWait: a load above what they serve, not a
// burst. Overloaded and non-empty for maxWait/8, it serves the newest
// first, so that a surge's first requests do not make all the later ones
// wait. Overloaded, non-empty for maxWait/4, and with its oldest waiter
// older than maxWait/80 at every arrival for maxWait/2 (CoDel's target and
// interval at the default wait), it is standing: a newcomer then waits at
// most maxWait/80, so that the requests admitted are fresh and the others
// learn early that they will not be. Requests marked
// sluice.PriorityCritical are served before the others and always wait up
// to maxWait.
//
// Every instant it uses comes from an Admit: a Done needs none.
type queue struct {
	mu      sync.Mutex
	normal  []*waiter
	crit    []*waiter
	size    int
	maxWait time.Duration
	// since is the instant the queue last turned non-empty.
	since    time.Duration
	lifo     bool
	standing bool
	// late is the instant from which every arrival found the oldest waiter
	// older than a standing queue's wait; -1 while one did not.
	late time.Duration
	// lastDrop is the instant the last waiter ran out of time: the queue
	// stays standing through the moments it empties until maxWait has
	// passed without one.
	lastDrop time.Duration
	// The requests that entered (in) and left for a slot (out) since
	// winStart, and in the maxWait before (lastIn, lastOut).
	winStart        time.Duration
	in, out         int
	lastIn, lastOut int
	// shorter is closed when reconfigure shortens the wait, so that the
	// requests waiting wait no longer than the new one; made by an
	// enqueue, as the pool's channels are, nil until one needs it.
	shorter chan struct{}
	pool    sync.Pool // of *waiter; per queue, so that its channels stay in one synctest bubble
}

type waiter struct {
	ch      chan struct{}
	shorter chan struct{} // the queue's when it entered
	granted bool
	evicted bool          // turned out of a full queue for a critical request
	at      time.Duration // the instant it entered the queue
	grant   time.Duration // the instant it was granted its slot
}

// The queue's discipline (see queue): newest first once overloaded and
// non-empty for maxWait/lifoAfter; standing once overloaded and non-empty
// for maxWait/standingAfter, less than a wait, or the early waiters would
// all run out of time together, empty the queue and start it afresh; a
// newcomer to a standing queue waits maxWait/standingWait, and it stands
// only once its oldest waiter has been older than that for
// maxWait/lateFor; overloaded is more in than out by overloadRatio-1 of
// what the slots serve, over at least overloadMin requests.
const (
	lifoAfter     = 8
	standingAfter = 4
	standingWait  = 80
	overloadRatio = 1.25
	overloadMin   = 10
	lateFor       = 2
)

// overloaded reports whether more requests entered the queue than left it
// for a slot, in the current maxWait or the one before, by more than
// overloadRatio-1 of what the slots serve in a maxWait: served a second.
// Counted against the queue's own traffic instead, the bursts of a load at
// capacity, which the queue takes by turns, would pass for overload. With
// served 0 (a bulkhead's limit learns nothing), more entered than left by
// overloadRatio. It first moves the window on to now.
func (q *queue) overloaded(now time.Duration, served int64) bool {
	if gap := now - q.winStart; gap >= q.maxWait {
		q.lastIn, q.lastOut = q.in, q.out
		if gap >= 2*q.maxWait {
			q.lastIn, q.lastOut = 0, 0
		}
		q.in, q.out, q.winStart = 0, 0, now
	}
	perWait := float64(served) * q.maxWait.Seconds()
	over := func(in, out int) bool {
		if in < overloadMin {
			return false
		}
		if perWait > 0 {
			return float64(in-out) > (overloadRatio-1)*perWait
		}
		return float64(in) > overloadRatio*float64(out)
	}
	return over(q.in, q.out) || over(q.lastIn, q.lastOut)
}

func (q *queue) len() int { return len(q.normal) + len(q.crit) }

// enqueue adds a waiter that arrived at now, under q.mu, and returns it with
// how long it may wait; nil when the queue is full. served is what the
// slots serve a second, as overloaded takes it.
func (q *queue) enqueue(now time.Duration, critical bool, served int64) (*waiter, time.Duration) {
	if q.len() >= q.size {
		if !critical || len(q.normal) == 0 {
			return nil, 0
		}
		// Critical requests are shed last: a full queue turns out its
		// newest normal waiter for one, which is rejected as one whose
		// wait ran out is.
		n := len(q.normal) - 1
		out := q.normal[n]
		q.normal[n] = nil
		q.normal = q.normal[:n]
		out.evicted = true
		out.grant = now // the instant it left the queue
		out.ch <- struct{}{}
	}
	if q.maxWait > 0 { // with no wait bound, no standing queue to tell from a burst
		if q.len() == 0 && (!q.standing || now-q.lastDrop > q.maxWait) {
			q.since = now
		}
		over := q.overloaded(now, served)
		// Noted at every arrival, which is what late means: one noted at
		// some only would date from an earlier overload.
		late := q.lateFor(now)
		q.lifo = over && now-q.since > q.maxWait/lifoAfter
		q.standing = over && now-q.since > q.maxWait/standingAfter && (q.standing || late >= q.maxWait/lateFor)
		q.in++
	}
	w, ok := q.pool.Get().(*waiter)
	if !ok {
		w = &waiter{ch: make(chan struct{}, 1)}
	}
	w.granted, w.evicted, w.at = false, false, now
	w.shorter = q.shorterChan()
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

// reconfigure sets the queue's size and maximum wait, under q.mu. A new
// wait starts the queue's discipline afresh: its order, and whether it is
// standing, were judged against the old one (and a wait of 0 judges
// nothing, so it would keep them for good).
func (q *queue) reconfigure(size int, maxWait time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if maxWait != q.maxWait {
		q.lifo, q.standing, q.late = false, false, -1
	}
	if maxWait > 0 && (q.maxWait == 0 || maxWait < q.maxWait) && q.shorter != nil {
		close(q.shorter) // the requests waiting wait no longer than maxWait
		q.shorter = nil
	}
	q.size, q.maxWait = size, maxWait
}

// shorterChan returns the channel reconfigure closes when it shortens the
// wait, under q.mu.
func (q *queue) shorterChan() chan struct{} {
	if q.shorter == nil {
		q.shorter = make(chan struct{})
	}
	return q.shorter
}

// lateFor returns how long every arrival has found the oldest waiter
// older than a standing queue's wait, under q.mu; 0 when this one does
// not. That wait is CoDel's target, and a queue whose oldest waiter stays
// above it is one a burst did not make: at a service's capacity, Poisson
// arrivals fill the queue by turns, and it drains between them.
func (q *queue) lateFor(now time.Duration) time.Duration {
	var oldest *waiter
	switch {
	case len(q.normal) > 0:
		oldest = q.normal[0]
	case len(q.crit) > 0:
		oldest = q.crit[0]
	}
	if oldest == nil || now-oldest.at <= max(q.maxWait/standingWait, 1) {
		q.late = -1
		return 0
	}
	if q.late < 0 {
		q.late = now
	}
	return now - q.late
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
	q.out++
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
// It reports whether the slot came, and the instant it was granted; when it
// did not, w has left the queue, a slot granted as the wait ended has been
// handed to release, and the instant is the one it left the queue at: its
// wait ran out, a critical request turned it out, or its caller's context
// ended (measured on the runtime's clock from now: a rejection answered
// with the instant it arrived at would date its RetryAfter from before the
// calls that ended meanwhile had started).
func (q *queue) await(ctx context.Context, w *waiter, now, wait time.Duration, waiting *atomic.Int64, release func(time.Duration)) (time.Duration, bool) {
	began := time.Now()
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	var timeout <-chan time.Time
	if wait > 0 {
		t = time.NewTimer(wait)
		timeout = t.C
	}
	timedOut := false
	shorter := w.shorter
wait:
	select {
	case <-shorter:
		// Reconfigured with a shorter wait: this request waits no longer
		// than it, from when it came.
		q.mu.Lock()
		if mw := q.maxWait; mw > 0 && (wait == 0 || mw < wait) {
			wait = mw
		}
		shorter = q.shorterChan()
		q.mu.Unlock()
		if wait == 0 { // the bound was lifted again before this one woke
			goto wait
		}
		left := wait - time.Since(began)
		if left <= 0 {
			timedOut = true
			break
		}
		if t == nil {
			t = time.NewTimer(left)
			timeout = t.C
		} else {
			t.Reset(left)
		}
		goto wait
	case <-w.ch:
		if w.evicted { // the queue took it out
			end := w.grant
			waiting.Add(-1)
			q.pool.Put(w)
			return end, false
		}
		granted := w.grant
		if granted == unknownInstant {
			granted = now + time.Since(began) // as a wait run out is measured
		}
		q.pool.Put(w)
		// The Done that freed the slot woke this goroutine to run next on
		// its processor, ahead of every other runnable goroutine: the ones
		// reading new requests from the network would wait while waiters
		// handed slots to one another, and arrivals would queue unseen in
		// front of the Shedder. Yielding puts it behind them.
		runtime.Gosched()
		return granted, true
	case <-ctx.Done():
	case <-timeout:
		timedOut = true
	}
	q.mu.Lock()
	waited := time.Since(began)
	if wait > 0 {
		waited = min(waited, wait)
	}
	end := now + waited
	if timedOut {
		end = now + wait
		q.lastDrop = max(q.lastDrop, end)
	}
	if w.evicted {
		// Turned out as the wait ended: already out of the queue.
		end = min(end, w.grant)
		waiting.Add(-1)
		q.mu.Unlock()
		<-w.ch
		q.pool.Put(w)
		return end, false
	}
	if w.granted {
		// The slot came as the wait ended: take it and give it back.
		q.mu.Unlock()
		<-w.ch
		granted := w.grant
		if granted == unknownInstant {
			granted = end
		}
		q.pool.Put(w)
		release(granted)
		return end, false
	}
	q.remove(w)
	waiting.Add(-1)
	q.mu.Unlock()
	q.pool.Put(w)
	return end, false
}

// critical reports whether ctx marks its request sluice.PriorityCritical.
func critical(ctx context.Context) bool {
	return sluice.PriorityFrom(ctx) == sluice.PriorityCritical
}
