package breaker_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/policytest"
)

// A listener that ends its goroutine (runtime.Goexit, as t.FailNow does)
// keeps no later change from being heard.
func TestAListenersGoexitStrandsNoChange(t *testing.T) {
	b, err := breaker.New("x")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var heard []string
	b.Subscribe(func(c sluice.StateChange) { mu.Lock(); heard = append(heard, c.To); mu.Unlock() })
	first := true
	b.Subscribe(func(sluice.StateChange) {
		if first {
			first = false
			runtime.Goexit()
		}
	})
	done := make(chan struct{})
	go func() { defer close(done); b.ForceOpen() }()
	<-done
	b.Reset()
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 2 || heard[0] != "open" || heard[1] != "closed" {
		t.Fatalf("heard %v, want [open closed]", heard)
	}
}

// A member's own listener that panics keeps its Group's listeners from
// nothing: they hear the change before the panic is raised again.
func TestAMembersListenerPanicStrandsNoGroupChange(t *testing.T) {
	clk := sluice.NewManualClock(0)
	g, err := breaker.NewGroup("g", breaker.WithConsecutiveFailures(1), breaker.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var heard []string
	g.Subscribe(func(c sluice.StateChange) { mu.Lock(); heard = append(heard, c.Policy+":"+c.To); mu.Unlock() })
	v := policytest.AnswerOf(g.Admit(res("a"), 0))
	if v.Cause != nil {
		t.Fatal(v.Cause)
	}
	g.Done(v.Ticket, sluice.Success, 0, 0)
	b, ok := g.Get("a")
	if !ok {
		t.Fatal("no breaker for a")
	}
	b.Subscribe(func(sluice.StateChange) { panic("boom") })
	v = policytest.AnswerOf(g.Admit(res("a"), 0))
	if v.Cause != nil {
		t.Fatal(v.Cause)
	}
	var got any
	func() {
		defer func() { got = recover() }()
		g.Done(v.Ticket, sluice.Failure, 0, 0)
	}()
	if got != "boom" {
		t.Fatalf("panic %v, want boom raised again", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 1 || heard[0] != "breaker/g/a:open" {
		t.Fatalf("the Group's listeners heard %v, want [breaker/g/a:open]", heard)
	}
}

// Counts reports the run the breaker counts: after its first failure left
// the window, the failures still in it.
func TestCountsReportsTheRunTheBreakerTripsOn(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b, err := breaker.New("x", breaker.WithConsecutiveFailures(3),
		breaker.WithRollingWindow(time.Second, 10), breaker.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	fail := func(at time.Duration) {
		clk.Set(at)
		v := policytest.AnswerOf(b.Admit(context.Background(), at))
		if v.Cause != nil {
			t.Fatalf("at %v: %v", at, v.Cause)
		}
		b.Done(v.Ticket, sluice.Failure, at, 0)
	}
	fail(0)
	fail(950 * time.Millisecond)
	fail(1000 * time.Millisecond)
	clk.Set(1100 * time.Millisecond)
	reported := b.Counts().ConsecutiveFailures
	fail(1100 * time.Millisecond)
	if b.State() != breaker.StateOpen {
		t.Fatalf("state %v, want open: the run is 950, 1000, 1100", b.State())
	}
	if reported != 2 {
		t.Fatalf("Counts().ConsecutiveFailures = %d just before one failure tripped a run of 3; want 2", reported)
	}
}

// Failures that end at once, after the run's first failure left the
// window, are counted once each.
func TestConcurrentFailuresAreCountedOnceInARun(t *testing.T) {
	const k = 6
	for trial := range 300 {
		clk := sluice.NewManualClock(0)
		b, err := breaker.New("x", breaker.WithConsecutiveFailures(k+1),
			breaker.WithRollingWindow(time.Second, 10), breaker.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		v := policytest.AnswerOf(b.Admit(context.Background(), 0))
		b.Done(v.Ticket, sluice.Failure, 0, 0)
		at := 1500 * time.Millisecond
		clk.Set(at)
		var tickets [k]sluice.Ticket
		for i := range tickets {
			v := policytest.AnswerOf(b.Admit(context.Background(), at))
			if v.Cause != nil {
				t.Fatal(v.Cause)
			}
			tickets[i] = v.Ticket
		}
		var start, wg sync.WaitGroup
		start.Add(1)
		for i := range tickets {
			wg.Go(func() { start.Wait(); b.Done(tickets[i], sluice.Failure, at, 0) })
		}
		start.Done()
		wg.Wait()
		if b.State() != breaker.StateClosed {
			t.Fatalf("trial %d: %d failures in the window tripped WithConsecutiveFailures(%d): %+v", trial, k, k+1, b.Counts())
		}
	}
}

func TestReconfigureNamesTheNilOption(t *testing.T) {
	b, err := breaker.New("x")
	if err != nil {
		t.Fatal(err)
	}
	if err = b.Reconfigure(nil); err == nil || err.Error() != "breaker: option 0 is nil" {
		t.Fatalf("Reconfigure(nil) = %v, want breaker: option 0 is nil", err)
	}
}

// An open breaker a full Group drops closes as it goes: its listeners, and
// a signal of the Group's open members, do not count it open for good.
func TestADroppedOpenMemberIsHeardClosing(t *testing.T) {
	clk := sluice.NewManualClock(0)
	g, err := breaker.NewGroup("deps", breaker.WithMaxBreakers(1), breaker.WithConsecutiveFailures(1),
		breaker.WithOpenDuration(time.Second), breaker.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	open := map[string]bool{}
	g.Subscribe(func(c sluice.StateChange) { mu.Lock(); open[c.Policy] = c.To == "open"; mu.Unlock() })
	call := func(key string, o sluice.Outcome) {
		t.Helper()
		now := clk.Now()
		v := policytest.AnswerOf(g.Admit(res(key), now))
		if v.Cause != nil {
			t.Fatalf("%s at %v: %v", key, now, v.Cause)
		}
		g.Done(v.Ticket, o, now, 0)
	}
	call("gone", sluice.Failure)
	clk.Advance(time.Hour)
	call("other", sluice.Success) // drops "gone", open and idle
	mu.Lock()
	defer mu.Unlock()
	if open["breaker/deps/gone"] {
		t.Fatal("the dropped open breaker was never heard closing")
	}
}
