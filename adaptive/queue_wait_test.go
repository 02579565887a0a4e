package adaptive_test

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/policytest"
)

// A request that waits in the queue and is turned away when its wait runs
// out makes 3 allocations (its timer's); the handling of a wait shortened
// by Reconfigure adds none.
func TestAQueuedRequestTurnedAwayAllocatesThree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(10, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if v := policytest.AnswerOf(b.Admit(ctx, 0)); v.Cause != nil {
			t.Fatal(v.Cause)
		}
		b.Admit(ctx, 0) // the pool's first waiter
		allocs := testing.AllocsPerRun(100, func() {
			if _, _, err := b.Admit(ctx, 0); err == nil {
				t.Fatal("admitted beside a full slot")
			}
		})
		t.Logf("%.0f allocations per queued request turned away", allocs)
		if allocs > 3 {
			t.Fatalf("%.0f allocations per queued request turned away, want 3", allocs)
		}
	})
}

// A request queued without a bound, woken by a Reconfigure that gave the
// queue one and lifted it again before it ran (two reloads in a row),
// waits on: no bound is in force. GOMAXPROCS(1) keeps the woken waiter from
// running between the two calls.
func TestABoundLiftedAgainDoesNotTurnAQueuedRequestAway(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(10, 0))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		v := policytest.AnswerOf(b.Admit(ctx, 0))
		if v.Cause != nil {
			t.Fatal(v.Cause)
		}
		got := make(chan time.Duration, 1)
		go func() {
			b.Admit(ctx, 0) // admitted once the slot frees, or turned away
			got <- now()
		}()
		synctest.Wait() // queued, no bound
		if err := b.Reconfigure(1, adaptive.WithQueue(10, 100*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if err := b.Reconfigure(1, adaptive.WithQueue(10, 0)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		b.Done(v.Ticket, sluice.Success, now(), now())
		if at := <-got; at < 100*time.Millisecond {
			t.Fatalf("the queued request was turned away %v after it came, with no bound in force and 100ms the shortest ever set", at)
		}
	})
}
