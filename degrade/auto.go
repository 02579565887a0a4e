package degrade

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/isnil"
)

// Hysteresis tells an [Auto] when to flip its switch, with two thresholds and
// two hold times so that a signal hovering around one level does not make the
// switch flap: the switch turns on once the signal has stayed above OnAbove
// for OnFor, and off once it has stayed below OffBelow for OffFor. A reading
// that breaks the streak starts the hold time over. OffBelow must not exceed
// OnAbove; between the two the switch keeps its state.
//
// For a signal of 0 and 1, such as a [StateSignal], put both thresholds at
// 0.5: on once it has been 1 for OnFor, off once it has been 0 for OffFor.
// The zero Hysteresis turns the switch on at the first reading above 0 and
// off at the first one below 0.
type Hysteresis struct {
	// OnAbove is the level the signal must stay above to turn the switch on.
	OnAbove float64
	// OnFor is how long it must stay above; 0: at the first reading.
	OnFor time.Duration
	// OffBelow is the level the signal must stay below to turn the switch
	// off.
	OffBelow float64
	// OffFor is how long it must stay below; 0: at the first reading.
	OffFor time.Duration
}

func (h Hysteresis) validate() error {
	for _, v := range []float64{h.OnAbove, h.OffBelow} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("degrade: Hysteresis: threshold %v is not finite", v)
		}
	}
	if h.OffBelow > h.OnAbove {
		return fmt.Errorf("degrade: Hysteresis: OffBelow %v exceeds OnAbove %v", h.OffBelow, h.OnAbove)
	}
	if h.OnFor < 0 || h.OffFor < 0 {
		return fmt.Errorf("degrade: Hysteresis: negative hold time (OnFor %v, OffFor %v)", h.OnFor, h.OffFor)
	}
	return nil
}

// Auto sets a [Switch] from a signal, with [Hysteresis]. It reads the signal
// when told: at each Check, or every interval while Run runs. Readings and
// hold times are measured on the switch's clock. A pinned switch is left
// alone. One Auto drives one switch: Run refuses to run while another Auto
// runs on its switch, which would fight it.
// An Auto is safe for concurrent use.
type Auto struct {
	sw     *Switch
	signal func() float64
	h      Hysteresis

	mu sync.Mutex
	// armed: the signal has called for the other state since since, while
	// the switch was in state armedOn.
	armed   bool
	armedOn bool
	since   time.Duration
	hands   uint64 // the switch's count of hand moves when the streak began
}

// NewAuto returns an Auto that sets sw from signal with hysteresis h. The
// signal is called from Check and Run, never under a lock of the package;
// a NaN reading is skipped.
func NewAuto(sw *Switch, signal func() float64, h Hysteresis) (*Auto, error) {
	if sw == nil || sw.clock == nil {
		return nil, errors.New("degrade: NewAuto: nil switch, or one not made by NewSwitch")
	}
	if signal == nil {
		return nil, errors.New("degrade: NewAuto: nil signal")
	}
	if err := h.validate(); err != nil {
		return nil, err
	}
	return &Auto{sw: sw, signal: signal, h: h}, nil
}

// Check reads the signal and the switch's clock, sets the switch as the
// hysteresis says, and reports whether it is on.
func (a *Auto) Check() bool {
	return a.observe(a.sw.clock.Now(), a.signal())
}

// observe takes v as the signal's reading at the monotonic instant now, sets
// the switch as the hysteresis says, and reports whether it is on.
func (a *Auto) observe(now time.Duration, v float64) bool {
	if math.IsNaN(v) || a.sw.Pinned() {
		return a.sw.On()
	}
	a.mu.Lock()
	// The count of hand moves before the state: a move after it is seen
	// by setAuto, which then leaves the switch alone.
	hands := a.sw.hands.Load()
	on := a.sw.On()
	var calls bool
	hold := a.h.OnFor
	if on {
		calls, hold = v < a.h.OffBelow, a.h.OffFor
	} else {
		calls = v > a.h.OnAbove
	}
	if !calls {
		a.armed = false
		a.mu.Unlock()
		return on
	}
	// A streak begun before a hand moved the switch (Set, Pin, Unpin,
	// whether or not a reading came in between) starts over.
	if !a.armed || a.armedOn != on || a.hands != hands {
		a.armed, a.armedOn, a.since, a.hands = true, on, now, hands
	}
	flip := now-a.since >= hold
	if flip {
		a.armed = false
	}
	a.mu.Unlock()
	if flip {
		// A hand that moved the switch since it was read wins: the flip
		// is made only if none has.
		a.sw.setAuto(!on, hands, now)
	}
	return a.sw.On()
}

// Run checks the signal now and then every interval until ctx is done, and
// returns ctx's error. It runs on the caller's goroutine: start it with go,
// and stop it by cancelling ctx. The interval must be positive.
func (a *Auto) Run(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("degrade: Auto.Run: interval %v is not positive", every)
	}
	if ctx == nil {
		return errors.New("degrade: Auto.Run: nil context")
	}
	if !a.sw.runner.CompareAndSwap(nil, a) {
		return fmt.Errorf("degrade: Auto.Run: another Auto runs on switch %q; give one Auto a signal that combines both (the larger reading, say)", a.sw.name)
	}
	defer a.sw.runner.Store(nil)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		a.Check()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// StateSignal is a signal of 1 while a policy of src is in one of states,
// by the last change src reported of it, and 0 otherwise: a breaker in
// "open", a load guard "shedding". A source that reports for several
// policies (a breaker.Group, for each member) reads 1 while any of them is
// in one of states. Until src reports a change the reading is 0. The
// returned unsubscribe function stops following src.
func StateSignal(src sluice.StateSource, states ...string) (signal func() float64, unsubscribe func(), err error) {
	if isnil.Of(src) {
		return nil, nil, errors.New("degrade: StateSignal: nil source")
	}
	if len(states) == 0 {
		return nil, nil, errors.New("degrade: StateSignal: no state")
	}
	set := make(map[string]bool, len(states))
	for _, s := range states {
		if s == "" {
			return nil, nil, errors.New("degrade: StateSignal: an empty state name, which no source reports")
		}
		set[s] = true
	}
	// The policies last reported in one of states; n is their number.
	var mu sync.Mutex
	in := make(map[string]struct{})
	var n atomic.Int64
	unsubscribe = src.Subscribe(func(c sluice.StateChange) {
		mu.Lock()
		if set[c.To] {
			in[c.Policy] = struct{}{}
		} else {
			delete(in, c.Policy)
		}
		n.Store(int64(len(in)))
		mu.Unlock()
	})
	return func() float64 {
		if n.Load() > 0 {
			return 1
		}
		return 0
	}, unsubscribe, nil
}
