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
	// Times counts the events of the same kind and text in a row that
	// this one stands for, the last at Time; 1 for most.
	Times int `json:"times"`
}

// events keeps the last maxEvents events.
type events struct {
	mu    sync.Mutex
	ring  [maxEvents]event
	total int
}

// add adds e; an event like the last one (refused actions from a client
// that keeps trying, say) is counted on it instead, so it cannot push the
// others out.
func (l *events) add(e event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total > 0 {
		last := &l.ring[(l.total-1)%maxEvents]
		if last.Kind == e.Kind && last.Guard == e.Guard && last.Policy == e.Policy && last.Text == e.Text {
			last.Time = e.Time
			last.Times++
			return
		}
	}
	e.Times = 1
	l.ring[l.total%maxEvents] = e
	l.total++
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
