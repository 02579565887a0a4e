package degrade_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
)

// gateClock answers Now with the instants in vals, in turn; the first call
// blocks, having read its instant, until gate is closed.
type gateClock struct {
	mu      sync.Mutex
	vals    []time.Duration
	n       int
	entered chan struct{}
	gate    chan struct{}
}

func (c *gateClock) Now() time.Duration {
	c.mu.Lock()
	v := c.vals[c.n]
	c.n++
	first := c.n == 1
	c.mu.Unlock()
	if first {
		close(c.entered)
		<-c.gate
	}
	return v
}

// Two Sets racing, the first held up right after it read the clock: the
// changes are told in the order of the flips, with instants that never run
// backwards (StateChange.At is "the monotonic instant of the change").
func TestSwitchStateChangeInstantsNeverRunBackwards(t *testing.T) {
	clk := &gateClock{
		vals:    []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second},
		entered: make(chan struct{}),
		gate:    make(chan struct{}),
	}
	sw, err := degrade.NewSwitch("recs", degrade.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []sluice.StateChange
	sw.Subscribe(func(c sluice.StateChange) {
		mu.Lock()
		seen = append(seen, c)
		mu.Unlock()
	})
	done := make(chan bool)
	go func() { done <- sw.Set(true) }() // an admin's Set, held up after reading the clock
	<-clk.entered
	others := make(chan struct{})
	go func() {
		sw.Set(true)
		sw.Set(false)
		close(others)
	}()
	time.Sleep(50 * time.Millisecond) // the others' chance to flip first, if they can
	close(clk.gate)
	<-done
	<-others
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 {
		t.Fatalf("got %d changes, want 2 or 3: %+v", len(seen), seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].At < seen[i-1].At {
			t.Errorf("change %d (%s→%s) At %v is before change %d's At %v: the listeners see time run backwards: %+v",
				i, seen[i].From, seen[i].To, seen[i].At, i-1, seen[i-1].At, seen)
		}
	}
}

// Run with a nil context is an error, as the rest of the API makes it
// (sluice.Execute, Guard.Do), not a panic.
func TestAutoRunWithANilContextIsAnError(t *testing.T) {
	sw, err := degrade.NewSwitch("s")
	if err != nil {
		t.Fatal(err)
	}
	a, err := degrade.NewAuto(sw, func() float64 { return 0 }, degrade.Hysteresis{})
	if err != nil {
		t.Fatal(err)
	}
	var p any
	func() {
		defer func() { p = recover() }()
		var ctx context.Context // nil, as a caller's unset field would be
		err = a.Run(ctx, time.Second)
	}()
	if p != nil {
		t.Fatalf("Run(nil, 1s) panicked: %v; want an error", p)
	}
	if err == nil {
		t.Fatal("Run(nil, 1s) returned nil; want an error")
	}
}

// A zero Fallbacks (not made by New) answers nothing: NewRoutes refuses
// it, for a route and as the default, as it refuses a nil one.
func TestNewRoutesRefusesAZeroFallbacks(t *testing.T) {
	good, err := degrade.New(degrade.OnError(degrade.Value("ok")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := degrade.NewRoutes(map[string]*degrade.Fallbacks[string]{"GET /a": {}}, good); err == nil {
		t.Error("NewRoutes accepted a zero Fallbacks for a route")
	}
	if _, err := degrade.NewRoutes(map[string]*degrade.Fallbacks[string]{"GET /a": good}, &degrade.Fallbacks[string]{}); err == nil {
		t.Error("NewRoutes accepted a zero Fallbacks as its default")
	}
}

// A zero Stale (not made by NewStale), or a zero Fallbacks, is refused by
// sluice.WithFallback; used on its own, a zero Stale's Execute is an error,
// not a nil pointer's panic, and Put and Get keep nothing.
func TestZeroFallbacksAreRefusedAndAZeroStaleFailsCleanly(t *testing.T) {
	s := &degrade.Stale[string]{}
	_, err := sluice.New(sluice.WithFallback(s))
	if err == nil || !strings.Contains(err.Error(), "zero *degrade.Stale[string]") {
		t.Errorf("WithFallback(a zero Stale): %v", err)
	}
	if _, err := sluice.New(sluice.WithFallback(&degrade.Fallbacks[string]{})); err == nil {
		t.Error("WithFallback took a zero Fallbacks")
	}
	g, err := sluice.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Execute(context.Background(), g, "k", func(context.Context) (string, error) { return "v", nil }); err == nil {
		t.Error("a zero Stale's Execute: no error")
	}
	s.Put("k", "v")
	if _, _, ok := s.Get("k"); ok {
		t.Error("a zero Stale kept an answer")
	}
}

// Two Autos on one switch would fight (one wired to a breaker's signal,
// one to the CPU's, turning it off while the breaker is still open): Run
// refuses to run while another Auto runs on the switch, and runs once it
// has stopped.
func TestASecondAutoRunningOnASwitchIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sw, err := degrade.NewSwitch("recs")
		if err != nil {
			t.Fatal(err)
		}
		h := degrade.Hysteresis{OnAbove: 0.5, OffBelow: 0.5}
		breakerOpen, err := degrade.NewAuto(sw, func() float64 { return 1 }, h)
		if err != nil {
			t.Fatal(err)
		}
		cpuHigh, err := degrade.NewAuto(sw, func() float64 { return 0 }, h)
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		ran := make(chan error)
		go func() { ran <- breakerOpen.Run(ctx, time.Second) }()
		synctest.Wait()
		if err := cpuHigh.Run(context.Background(), time.Second); err == nil || !strings.Contains(err.Error(), "another Auto") {
			t.Errorf("a second Auto ran on the switch: %v", err)
		}
		stop()
		<-ran
		ctx2, stop2 := context.WithTimeout(context.Background(), 2*time.Second)
		defer stop2()
		if err := cpuHigh.Run(ctx2, time.Second); err != context.DeadlineExceeded {
			t.Errorf("once the first stopped, the second Auto's Run: %v", err)
		}
	})
}
