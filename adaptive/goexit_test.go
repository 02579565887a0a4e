package adaptive_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/policytest"
)

// A subscriber that ends its goroutine (runtime.Goexit) keeps no later
// change from being heard.
func TestASubscribersGoexitStrandsNoChange(t *testing.T) {
	b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(0, 0))
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
	held := policytest.AnswerOf(b.Admit(context.Background(), 0))
	if held.Cause != nil {
		t.Fatal(held.Cause)
	}
	done := make(chan struct{})
	go func() { defer close(done); b.Admit(context.Background(), time.Millisecond) }() // shed
	<-done
	b.Done(held.Ticket, sluice.Success, 2*time.Millisecond, time.Millisecond)
	if v := policytest.AnswerOf(b.Admit(context.Background(), 3*time.Second)); v.Cause != nil {
		t.Fatal(v.Cause)
	}
	mu.Lock()
	defer mu.Unlock()
	// Subscribers run in map order: the Goexit may cost the change to
	// shedding, not the return to normal.
	if len(heard) == 0 || heard[len(heard)-1] != adaptive.StateNormal {
		t.Fatalf("heard %v, want the return to normal last", heard)
	}
}
