package degrade_test

import (
	"runtime"
	"sync"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
)

// A listener that panics keeps neither the other listeners nor the flips
// queued behind it from being heard; its panic comes out once they are.
func TestASwitchListenerPanicStrandsNoFlip(t *testing.T) {
	sw, err := degrade.NewSwitch("s")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var heard []string
	first := true
	sw.Subscribe(func(c sluice.StateChange) {
		if first {
			first = false
			sw.Set(false) // queued behind this flip
			panic("listener failed")
		}
	})
	sw.Subscribe(func(c sluice.StateChange) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, c.To)
	})
	func() {
		defer func() {
			if p := recover(); p != "listener failed" {
				t.Errorf("panic %v, want the listener's", p)
			}
		}()
		sw.Set(true)
	}()
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 2 || heard[0] != "on" || heard[1] != "off" {
		t.Errorf("the other listener heard %v, want [on off]", heard)
	}
}

// A listener that ends its goroutine (runtime.Goexit) keeps no later flip
// from being heard.
func TestASwitchListenersGoexitStrandsNoFlip(t *testing.T) {
	sw, err := degrade.NewSwitch("s")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var heard []string
	sw.Subscribe(func(c sluice.StateChange) { mu.Lock(); heard = append(heard, c.To); mu.Unlock() })
	first := true
	sw.Subscribe(func(sluice.StateChange) {
		if first {
			first = false
			runtime.Goexit()
		}
	})
	done := make(chan struct{})
	go func() { defer close(done); sw.Set(true) }()
	<-done
	sw.Set(false)
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 2 || heard[0] != "on" || heard[1] != "off" {
		t.Fatalf("heard %v, want [on off]", heard)
	}
}
