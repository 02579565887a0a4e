package degrade_test

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/internal/monoclock"
)

// changes records state changes.
type changes struct{ recorder[sluice.StateChange] }

func (c *changes) record(ch sluice.StateChange) { c.add(ch) }

func newSwitch(t testing.TB, name string, opts ...degrade.Option) *degrade.Switch {
	t.Helper()
	s, err := degrade.NewSwitch(name, opts...)
	require.NoError(t, err)
	return s
}

func TestSwitchManual(t *testing.T) {
	clock := sluice.NewManualClock(time.Second)
	s := newSwitch(t, "recommendations", degrade.WithClock(clock))
	var _ sluice.StateSource = s
	var seen changes
	unsub := s.Subscribe(seen.record)

	assert.Equal(t, "recommendations", s.Name())
	assert.False(t, s.On())
	assert.False(t, s.Set(false), "already off")
	assert.True(t, s.Set(true))
	assert.True(t, s.On())
	clock.Advance(time.Second)
	assert.True(t, s.Set(false))
	unsub()
	unsub()
	assert.True(t, s.Set(true))

	assert.Equal(t, []sluice.StateChange{
		{Policy: "recommendations", From: "off", To: "on", At: time.Second},
		{Policy: "recommendations", From: "on", To: "off", At: 2 * time.Second},
	}, seen.all())

	_, err := degrade.NewSwitch("s", degrade.WithClock(sluice.NewManualClock(0)), degrade.WithClock(sluice.NewManualClock(0)))
	assert.ErrorContains(t, err, "WithClock given twice")
}

func TestSwitchListenersRunOutsideTheLockAndSeeEveryFlipInOrder(t *testing.T) {
	s := newSwitch(t, "s", degrade.WithClock(sluice.NewManualClock(0)))
	var seen changes
	// A listener that flips the switch back: it must not deadlock, and the
	// second flip is delivered after the first.
	var bounced atomic.Bool
	s.Subscribe(func(c sluice.StateChange) {
		assert.False(t, s.Pinned()) // takes the switch's lock
		if c.To == "on" && !bounced.Swap(true) {
			s.Set(false)
		}
	})
	s.Subscribe(seen.record)
	s.Subscribe(nil)()
	s.Set(true)
	var tos []string
	for _, c := range seen.all() {
		tos = append(tos, c.From+">"+c.To)
	}
	assert.Equal(t, []string{"off>on", "on>off"}, tos)
	assert.False(t, s.On())
}

func TestSwitchListenerPanicDoesNotStopLaterFlips(t *testing.T) {
	s := newSwitch(t, "s")
	var seen changes
	s.Subscribe(func(c sluice.StateChange) {
		if c.To == "on" {
			panic("listener broke")
		}
	})
	s.Subscribe(seen.record)
	assert.PanicsWithValue(t, "listener broke", func() { s.Set(true) })
	s.Set(false)
	require.Len(t, seen.all(), 2, "the other listener heard the flip too")
	assert.Equal(t, "on", seen.all()[0].To)
	assert.Equal(t, "off", seen.all()[1].To)
}

func TestSwitchConcurrentFlipsAreAllDelivered(t *testing.T) {
	s := newSwitch(t, "s")
	var n atomic.Int64
	var last atomic.Value
	s.Subscribe(func(c sluice.StateChange) {
		n.Add(1)
		if prev, ok := last.Load().(string); ok {
			assert.Equal(t, prev, c.From, "flips arrive in order")
		}
		last.Store(c.To)
	})
	var flips atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				if s.Set((i+w)%2 == 0) {
					flips.Add(1)
				}
				_ = s.On()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, flips.Load(), n.Load())
}

func TestSwitchPin(t *testing.T) {
	clock := sluice.NewManualClock(0)
	s := newSwitch(t, "s", degrade.WithClock(clock))
	a, err := degrade.NewAuto(s, func() float64 { return 1 }, degrade.Hysteresis{OnAbove: 0.5, OffBelow: 0.5, OffFor: 0})
	require.NoError(t, err)

	assert.False(t, s.Pin(false))
	assert.True(t, s.Pinned())
	assert.False(t, a.Check(), "a pinned switch is left alone")
	assert.True(t, s.Set(true), "Set works on a pinned switch")
	assert.True(t, s.Pinned())
	s.Unpin()
	assert.False(t, s.Pinned())
	s.Set(false)
	assert.True(t, a.Check())
}

func TestSwitchOnAllocatesNothing(t *testing.T) {
	s := newSwitch(t, "s")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = s.On() }))
}

func TestNewSwitchValidates(t *testing.T) {
	_, err := degrade.NewSwitch("")
	assert.ErrorContains(t, err, "empty name")
	_, err = degrade.NewSwitch("s", degrade.WithClock(nil))
	assert.ErrorContains(t, err, "nil clock")
}

func BenchmarkSwitchOn(b *testing.B) {
	s, err := degrade.NewSwitch("s")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			if s.On() {
				n++
			}
		}
		_ = n
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			n := 0
			for pb.Next() {
				if s.On() {
					n++
				}
			}
			_ = n
		})
	})
}

func TestAutoHysteresis(t *testing.T) {
	clock := sluice.NewManualClock(0)
	s := newSwitch(t, "cpu", degrade.WithClock(clock))
	var seen changes
	s.Subscribe(seen.record)
	a, err := degrade.NewAuto(s, func() float64 { return 0 }, degrade.Hysteresis{
		OnAbove: 0.8, OnFor: 10 * time.Second, OffBelow: 0.5, OffFor: 30 * time.Second,
	})
	require.NoError(t, err)
	sec := func(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }
	steps := []struct {
		at   time.Duration
		v    float64
		want bool
	}{
		{sec(0), 0.9, false},  // above: the hold starts
		{sec(5), 0.95, false}, // still holding
		{sec(9), 0.7, false},  // dips below OnAbove: the streak breaks
		{sec(10), 0.9, false}, // starts over
		{sec(19), 0.9, false},
		{sec(20), 0.85, true}, // 10 s above: on
		{sec(21), 0.6, true},  // between the thresholds: stays on
		{sec(22), 0.4, true},  // below OffBelow: the off hold starts
		{sec(40), 0.6, true},  // breaks the streak
		{sec(41), 0.1, true},  // starts over
		{sec(70), 0.1, true},
		{sec(71), 0.1, false}, // 30 s below: off
		{sec(72), 0.79, false},
		{sec(73), 0.8, false}, // not above 0.8
		{sec(74), 0.81, false},
		{sec(80), 0.81, false},
	}
	for i, st := range steps {
		assert.Equal(t, st.want, a.Observe(st.at, st.v), "step %d at %v", i, st.at)
	}
	assert.Equal(t, []sluice.StateChange{
		{Policy: "cpu", From: "off", To: "on", At: 20 * time.Second},
		{Policy: "cpu", From: "on", To: "off", At: 71 * time.Second},
	}, seen.all())
}

func TestAutoWithZeroHoldFlipsAtOnceAndSkipsNaN(t *testing.T) {
	s := newSwitch(t, "s")
	a, err := degrade.NewAuto(s, func() float64 { return 0 }, degrade.Hysteresis{OnAbove: 1, OffBelow: 1})
	require.NoError(t, err)
	assert.True(t, a.Observe(0, 2))
	assert.True(t, a.Observe(0, nan()))
	assert.True(t, a.Observe(0, 1))
	assert.False(t, a.Observe(0, 0.5))
}

func TestAutoResetsItsHoldWhenTheSwitchIsSetByHand(t *testing.T) {
	s := newSwitch(t, "s")
	a, err := degrade.NewAuto(s, func() float64 { return 0 }, degrade.Hysteresis{OnAbove: 0.5, OnFor: 10 * time.Second, OffBelow: 0.5, OffFor: 10 * time.Second})
	require.NoError(t, err)
	assert.False(t, a.Observe(0, 1)) // the on hold starts at 0
	s.Set(true)                      // an operator turns it on
	assert.True(t, a.Observe(5*time.Second, 0))
	assert.True(t, a.Observe(14*time.Second, 0), "the off hold started at 5 s, not at 0")
	assert.False(t, a.Observe(15*time.Second, 0))
}

func TestAutoRunFollowsTheSignalOnTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := monoclock.New()
		s := newSwitch(t, "overload", degrade.WithClock(clock))
		var seen changes
		s.Subscribe(seen.record)
		var level atomic.Value
		level.Store(0.0)
		a, err := degrade.NewAuto(s, func() float64 { return level.Load().(float64) }, degrade.Hysteresis{
			OnAbove: 0.8, OnFor: 3 * time.Second, OffBelow: 0.5, OffFor: 5 * time.Second,
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- a.Run(ctx, time.Second) }()

		time.Sleep(10 * time.Second)
		synctest.Wait()
		assert.False(t, s.On())
		level.Store(0.9)
		time.Sleep(2500 * time.Millisecond) // readings at 11 s and 12 s
		synctest.Wait()
		assert.False(t, s.On())
		time.Sleep(time.Second) // reading at 13 s: above since 11 s, not yet 3 s
		synctest.Wait()
		assert.False(t, s.On())
		time.Sleep(time.Second) // reading at 14 s
		synctest.Wait()
		assert.True(t, s.On())
		level.Store(0.1)            // at 14.5 s
		time.Sleep(5 * time.Second) // readings at 15 s ... 19 s: below since 15 s
		synctest.Wait()
		assert.True(t, s.On())
		time.Sleep(time.Second) // reading at 20 s
		synctest.Wait()
		assert.False(t, s.On())

		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
		got := seen.all()
		require.Len(t, got, 2)
		assert.Equal(t, 14*time.Second, got[0].At)
		assert.Equal(t, 20*time.Second, got[1].At)
	})
}

func TestAutoRunValidates(t *testing.T) {
	a, err := degrade.NewAuto(newSwitch(t, "s"), func() float64 { return 0 }, degrade.Hysteresis{})
	require.NoError(t, err)
	assert.ErrorContains(t, a.Run(context.Background(), 0), "interval")
}

func TestNewAutoValidates(t *testing.T) {
	s := newSwitch(t, "s")
	sig := func() float64 { return 0 }
	tests := []struct {
		name string
		sw   *degrade.Switch
		sig  func() float64
		h    degrade.Hysteresis
		want string
	}{
		{"nil switch", nil, sig, degrade.Hysteresis{}, "nil switch"},
		{"nil signal", s, nil, degrade.Hysteresis{}, "nil signal"},
		{"inverted", s, sig, degrade.Hysteresis{OnAbove: 0.5, OffBelow: 0.8}, "exceeds"},
		{"NaN", s, sig, degrade.Hysteresis{OnAbove: nan()}, "not finite"},
		{"negative hold", s, sig, degrade.Hysteresis{OffFor: -time.Second}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := degrade.NewAuto(tt.sw, tt.sig, tt.h)
			assert.Nil(t, a)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// source is a StateSource whose changes the test makes.
type source struct {
	mu   sync.Mutex
	subs []func(sluice.StateChange)
}

func (s *source) Subscribe(fn func(sluice.StateChange)) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = append(s.subs, fn)
	i := len(s.subs) - 1
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.subs[i] = nil
	}
}

func (s *source) change(to string) {
	s.mu.Lock()
	subs := slices.Clone(s.subs)
	s.mu.Unlock()
	for _, fn := range subs {
		if fn != nil {
			fn(sluice.StateChange{Policy: "breaker/payments", To: to})
		}
	}
}

func TestStateSignalFollowsABreaker(t *testing.T) {
	src := &source{}
	sig, unsub, err := degrade.StateSignal(src, "open", "half-open")
	require.NoError(t, err)
	s := newSwitch(t, "payments-degraded")
	a, err := degrade.NewAuto(s, sig, degrade.Hysteresis{OnAbove: 0.5, OffBelow: 0.5, OffFor: 2 * time.Second})
	require.NoError(t, err)

	assert.False(t, a.Observe(0, sig()))
	src.change("open")
	assert.True(t, a.Observe(time.Second, sig()))
	src.change("half-open")
	assert.True(t, a.Observe(2*time.Second, sig()))
	src.change("closed")
	assert.True(t, a.Observe(3*time.Second, sig()))
	assert.False(t, a.Observe(5*time.Second, sig()))
	unsub()
	src.change("open")
	assert.Zero(t, sig(), "unsubscribed")

	_, _, err = degrade.StateSignal(nil, "open")
	assert.ErrorContains(t, err, "nil source")
	_, _, err = degrade.StateSignal(src)
	assert.ErrorContains(t, err, "no state")
}

func nan() float64 { return math.NaN() }

// A pin breaks the hysteresis streak: readings taken while the switch is
// pinned, low ones included, are not a hold still running when it is
// unpinned.
func TestAutoStartsItsHoldOverAfterAPin(t *testing.T) {
	s := newSwitch(t, "s")
	a, err := degrade.NewAuto(s, func() float64 { return 0 }, degrade.Hysteresis{
		OnAbove: 0.8, OnFor: 10 * time.Second, OffBelow: 0.5, OffFor: 10 * time.Second,
	})
	require.NoError(t, err)
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	assert.False(t, a.Observe(sec(0), 0.9)) // the hold starts at 0
	s.Pin(false)
	for i := 1; i < 30; i++ {
		assert.False(t, a.Observe(sec(i), 0.1)) // low for 29 s, pinned
	}
	s.Unpin()
	assert.False(t, a.Observe(sec(30), 0.9), "one high reading after the pin starts the hold")
	assert.True(t, a.Observe(sec(40), 0.9), "ten seconds of it complete it")
}

// A hand's move between two readings (a Pin and Unpin, a Set there and
// back) breaks the hysteresis streak as a pin seen by a reading does: the
// hold starts over.
func TestAutoHoldStartsOverAfterAHandMoveBetweenReadings(t *testing.T) {
	for name, move := range map[string]func(*degrade.Switch){
		"pin and unpin": func(s *degrade.Switch) { s.Pin(false); s.Unpin() },
		"set and back":  func(s *degrade.Switch) { s.Set(true); s.Set(false) },
	} {
		s := newSwitch(t, name)
		a, err := degrade.NewAuto(s, func() float64 { return 0 }, degrade.Hysteresis{OnAbove: 1, OnFor: 10, OffBelow: 0.5, OffFor: 10})
		require.NoError(t, err)
		require.False(t, a.Observe(0, 2)) // the hold starts
		move(s)
		assert.False(t, a.Observe(10, 2), "%s: the hold starts over", name)
		assert.True(t, a.Observe(20, 2), "%s: and completes", name)
	}
}

// An Auto's flip decided before a hand's move does not undo it: the
// operator's Pin(true), racing the Auto's flip to off, holds, whichever
// comes first. (A Set that changes nothing is no move, and does not stop
// it.) Played many times, a bounded number.
func TestAutoFlipLeavesAConcurrentHandMove(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for i := range n {
		s, err := degrade.NewSwitch("s")
		require.NoError(t, err)
		a, err := degrade.NewAuto(s, func() float64 { return 0 }, degrade.Hysteresis{
			OnAbove: 0.8, OnFor: time.Hour, OffBelow: 0.5, OffFor: time.Hour,
		})
		require.NoError(t, err)
		s.Set(true)
		a.Observe(0, 0.1) // the off streak begins
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() { defer wg.Done(); <-start; a.Observe(2*time.Hour, 0.1) }()
		go func() { defer wg.Done(); <-start; s.Pin(true) }()
		close(start)
		wg.Wait()
		if !s.On() {
			t.Fatalf("iteration %d: the operator's Pin(true) was lost to the Auto's flip decided before it", i)
		}
	}
}
