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

// maxRefused is how many refused actions are kept, apart from the other
// events: a page of another site can make a viewer's browser send
// refused actions at will, and they must not push the others out.
const maxRefused = 10

// events keeps the last maxEvents events, and the last maxRefused refused
// actions in a ring of their own.
type events struct {
	mu      sync.Mutex
	main    ring
	refused ring
}

// ring is a ring of events; it keeps the last len(buf) added.
type ring struct {
	buf   []event
	total int
}

// add adds e; an event like the last one (refused actions from a client
// that keeps trying, say) is counted on it instead.
func (r *ring) add(e event) {
	if r.total > 0 {
		last := &r.buf[(r.total-1)%len(r.buf)]
		if last.Kind == e.Kind && last.Guard == e.Guard && last.Policy == e.Policy && last.Text == e.Text {
			last.Time = e.Time
			last.Times++
			return
		}
	}
	e.Times = 1
	r.buf[r.total%len(r.buf)] = e
	r.total++
}

// newest returns the events kept, newest first.
func (r *ring) newest() []event {
	n := min(r.total, len(r.buf))
	out := make([]event, n)
	for i := range n {
		out[i] = r.buf[(r.total-1-i)%len(r.buf)]
	}
	return out
}

func (l *events) add(e event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.main.buf == nil {
		l.main.buf, l.refused.buf = make([]event, maxEvents), make([]event, maxRefused)
	}
	if e.Kind == "refused" {
		l.refused.add(e)
		return
	}
	l.main.add(e)
}

// last returns the events kept, newest first: at most maxEvents, refused
// actions among them.
func (l *events) last() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, b := l.main.newest(), l.refused.newest()
	out := make([]event, 0, min(len(a)+len(b), maxEvents))
	for len(out) < cap(out) {
		if len(b) == 0 || len(a) > 0 && !b[0].Time.After(a[0].Time) {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}
