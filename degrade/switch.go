package degrade

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/isnil"
	"github.com/sluice-go/sluice/internal/listen"
)

// Switch is a named degradation switch. When it is on, handlers skip their
// non-core work (recommendations, rich fields, a second query) to spare the
// service under pressure, and a [Shed] policy turns whole non-core routes
// away. On is one atomic load: it allocates nothing and takes about a
// nanosecond. The switch is set by hand at run time with Set, or by an
// [Auto] from a signal. Pin holds it in a state that an Auto does not
// change, until Unpin.
//
// A Switch is a sluice.StateSource: listeners registered with Subscribe see
// every flip, as a StateChange from "off" to "on" or back, in the order of
// the flips, called outside the switch's lock. The zero Switch is not usable;
// make one with NewSwitch. A Switch is safe for concurrent use.
type Switch struct {
	on    atomic.Bool
	name  string
	clock sluice.Clock
	// hands counts the hand's moves (Set, Pin, Unpin): an Auto's streak
	// begun before one is broken by it.
	hands atomic.Uint64
	// runner is the Auto whose Run drives the switch, nil for none: a
	// second one would fight it.
	runner atomic.Pointer[Auto]

	mu       sync.Mutex
	lastAt   time.Duration // the instant of the last flip told: none is told before it
	told     bool          // a flip was told: lastAt holds
	pinned   bool
	subs     []subscriber // copied on write: a snapshot is read outside mu
	nextID   uint64
	pending  []sluice.StateChange
	draining bool
}

type subscriber struct {
	id uint64
	fn func(sluice.StateChange)
}

// Option configures a Switch or a Stale.
type Option func(*options) error

type options struct {
	clock    sluice.Clock
	clockSet bool
	name     string // a Stale's; "" unless WithName
}

// WithClock makes a Switch, and an Auto driving it, or a Stale measuring
// ages, read c instead of sluice.SystemClock. It is the clock option of
// every package of sluice.
func WithClock(c sluice.Clock) Option {
	return func(o *options) error {
		if isnil.Of(c) {
			return errors.New("degrade: WithClock: nil clock")
		}
		if o.clockSet {
			return errors.New("degrade: WithClock given twice: the last would silently replace the first")
		}
		o.clock, o.clockSet = c, true
		return nil
	}
}

// WithName names a Stale in the Guard's fallback events; the default is
// "stale". A Switch is named by NewSwitch's argument: given to NewSwitch,
// WithName is an error.
func WithName(name string) Option {
	return func(o *options) error {
		if name == "" {
			return errors.New("degrade: WithName: empty name")
		}
		if o.name != "" {
			return errors.New("degrade: WithName given twice: the last would silently replace the first")
		}
		o.name = name
		return nil
	}
}

// NewSwitch returns a Switch named name, off: turn it on with Set or Pin.
// The name must not be empty, and an option may be given once.
func NewSwitch(name string, opts ...Option) (*Switch, error) {
	if name == "" {
		return nil, errors.New("degrade: NewSwitch: empty name")
	}
	o := options{clock: sluice.SystemClock}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("degrade: NewSwitch: option %d is nil", i)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.name != "" {
		return nil, errors.New("degrade: NewSwitch: WithName applies to NewStale; a Switch is named by NewSwitch's argument")
	}
	return &Switch{name: name, clock: o.clock}, nil
}

// On reports whether the switch is on: whether to degrade.
func (s *Switch) On() bool { return s.on.Load() }

// Name returns the switch's name.
func (s *Switch) Name() string { return s.name }

// Set turns the switch on or off by hand and reports whether it flipped. An
// Auto driving the switch may flip it again at its next check; Pin keeps it.
// Set works on a pinned switch too, and the switch stays pinned.
func (s *Switch) Set(on bool) bool { return s.set(on, false) }

// Pin sets the switch to on or off and holds it there: an Auto leaves it
// alone until Unpin. It reports whether the switch flipped.
func (s *Switch) Pin(on bool) bool { return s.set(on, true) }

// Unpin hands the switch back to its Auto, if it has one. Its hold starts
// over at its next check, as after any move by hand: the switch follows the
// signal once the signal has called for the flip for the hold time since.
// Unpinning a switch not pinned does nothing.
func (s *Switch) Unpin() {
	s.mu.Lock()
	if s.pinned {
		s.pinned = false
		s.hands.Add(1)
	}
	s.mu.Unlock()
}

// Pinned reports whether the switch is pinned.
func (s *Switch) Pinned() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pinned
}

// setAuto is Set for an Auto, at the instant of the reading that flipped it,
// decided when the switch had seen hands moves by hand: it does nothing to
// a pinned switch, nor to one a hand has moved since.
func (s *Switch) setAuto(on bool, hands uint64, at time.Duration) bool {
	s.mu.Lock()
	if s.pinned || s.hands.Load() != hands {
		s.mu.Unlock()
		return false
	}
	return s.flip(on, at)
}

// set is a move by hand: Set, or Pin when pin; at the switch's present
// instant. One that changes nothing (the switch is so already, and pinned
// if pin) is no move: an Auto's hold goes on, or a loop that asserts the
// state would keep the Auto from ever flipping it.
func (s *Switch) set(on, pin bool) bool {
	s.mu.Lock()
	at := s.clock.Now() // under mu: flips are told in order, their instants too
	if s.on.Load() != on || (pin && !s.pinned) {
		s.hands.Add(1)
	}
	if pin {
		s.pinned = true
	}
	return s.flip(on, at)
}

// flip sets the switch to on at the instant at, with mu held, and delivers
// the change to the listeners; it returns with mu released and reports
// whether the switch flipped.
func (s *Switch) flip(on bool, at time.Duration) bool {
	if s.on.Load() == on {
		s.mu.Unlock()
		return false
	}
	s.on.Store(on)
	// An Auto's reading may be older than a flip made since: no change is
	// told with an instant before the one told before it.
	if s.told {
		at = max(at, s.lastAt)
	}
	s.lastAt, s.told = at, true
	if len(s.subs) == 0 {
		s.mu.Unlock()
		return true
	}
	s.pending = append(s.pending, sluice.StateChange{
		Policy: s.name, From: stateName(!on), To: stateName(on), At: at,
	})
	if s.draining {
		// The goroutine delivering the earlier flips delivers this one too,
		// after them.
		s.mu.Unlock()
		return true
	}
	s.draining = true
	s.drain()
	return true
}

// drain delivers the pending changes, in order, outside mu. It is called
// with mu held and returns with it released.
func (s *Switch) drain() {
	// A listener that panics must not keep the others, or the flips
	// queued behind, from being heard: its panic is raised once they are.
	var first listen.First
	locked := true
	defer func() {
		if !locked { // a listener's runtime.Goexit: let the next flip drain
			s.mu.Lock()
			s.draining = false
			s.mu.Unlock()
		}
	}()
	for len(s.pending) > 0 {
		c := s.pending[0]
		s.pending[0] = sluice.StateChange{}
		s.pending = s.pending[1:]
		subs := s.subs
		s.mu.Unlock()
		locked = false
		for _, sub := range subs {
			first.Call(sub.fn, c)
		}
		s.mu.Lock()
		locked = true
	}
	s.pending = s.pending[:0]
	s.draining = false
	s.mu.Unlock()
	first.Raise()
}

// stateName names a Switch's state as its StateChanges do: "on" or "off".
func stateName(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// Subscribe registers fn, called after every flip of the switch, outside its
// lock, in the order of the flips; the returned function removes it. It
// implements sluice.StateSource. A nil fn is ignored.
func (s *Switch) Subscribe(fn func(sluice.StateChange)) (unsubscribe func()) {
	if fn == nil {
		return func() {}
	}
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	subs := make([]subscriber, len(s.subs), len(s.subs)+1)
	copy(subs, s.subs)
	s.subs = append(subs, subscriber{id: id, fn: fn})
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			subs := make([]subscriber, 0, len(s.subs))
			for _, sub := range s.subs {
				if sub.id != id {
					subs = append(subs, sub)
				}
			}
			s.subs = subs
		})
	}
}
