package breaker

import (
	"sync"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/listen"
)

// subscriber is a state-change listener, added by Subscribe.
type subscriber struct {
	id uint64
	fn func(sluice.StateChange)
}

// notifier delivers state changes to listeners outside the breaker's lock,
// one at a time and in order. Transitions queue their change while holding
// the breaker's lock; then whoever finds no delivery under way delivers the
// queue until it is empty. A listener that causes another change (by calling
// Reset, say) queues it, and the loop that called the listener delivers it
// next, so no change is lost, repeated or reordered, and nothing deadlocks.
type notifier struct {
	mu         sync.Mutex
	pending    []sluice.StateChange
	delivering bool
	subs       []subscriber // copy on write
	nextID     uint64
}

func (n *notifier) queue(c sluice.StateChange) {
	n.mu.Lock()
	n.pending = append(n.pending, c)
	n.mu.Unlock()
}

func (n *notifier) add(s subscriber) (remove func()) {
	n.mu.Lock()
	n.nextID++
	s.id = n.nextID
	subs := make([]subscriber, len(n.subs), len(n.subs)+1)
	copy(subs, n.subs)
	n.subs = append(subs, s)
	n.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			subs := make([]subscriber, 0, len(n.subs))
			for _, x := range n.subs {
				if x.id != s.id {
					subs = append(subs, x)
				}
			}
			n.subs = subs
		})
	}
}

// deliver delivers the queued changes unless a delivery is under way. A
// listener that panics must not keep the others, or the changes queued
// behind, from being heard: its panic is kept in first, to raise once
// they are.
func (n *notifier) deliver(first *listen.First) {
	n.mu.Lock()
	if n.delivering || len(n.pending) == 0 {
		n.mu.Unlock()
		return
	}
	n.delivering = true
	n.mu.Unlock()
	finished := false
	defer func() {
		if !finished { // a listener's runtime.Goexit: let the next change deliver
			n.mu.Lock()
			n.delivering = false
			n.mu.Unlock()
		}
	}()
	for {
		n.mu.Lock()
		if len(n.pending) == 0 {
			// Checked and cleared under one lock, so a change queued by
			// another goroutine is either seen here or delivered by it.
			n.pending = nil
			n.delivering = false
			finished = true
			n.mu.Unlock()
			return
		}
		c := n.pending[0]
		n.pending = n.pending[1:]
		subs := n.subs
		n.mu.Unlock()
		for _, s := range subs {
			first.Call(s.fn, c)
		}
	}
}
