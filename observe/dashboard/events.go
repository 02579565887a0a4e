package dashboard

import (
	"sync"
	"time"
)

const maxEvents = 100

// event is one line of the event list.
type event struct {
	Time time.Time `json:"time"`
	// Kind is "state" (a policy's state changed), "fallback", "reload",
	// "action" (an admin action taken) or "refused" (one refused).
	Kind   string `json:"kind"`
	Guard  string `json:"guard,omitempty"`
	Policy string `json:"policy,omitempty"`
	Text   string `json:"text"`
}

// events keeps the last maxEvents events.
type events struct {
	mu    sync.Mutex
	ring  [maxEvents]event
	total int
}

func (l *events) add(e event) {
	l.mu.Lock()
	l.ring[l.total%maxEvents] = e
	l.total++
	l.mu.Unlock()
}

// last returns the events kept, newest first.
func (l *events) last() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := min(l.total, maxEvents)
	out := make([]event, n)
	for i := range n {
		out[i] = l.ring[(l.total-1-i)%maxEvents]
	}
	return out
}
