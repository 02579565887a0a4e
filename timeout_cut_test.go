package sluice_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/shedhook"
)

// A call that a deadline ended ran at least its latency, maybe much
// longer had it been let: the Guard tells a Shedder so (through
// shedhook.CutShort), and only for such a call. Its own deadline, or its
// caller's, cut it; a failure of its own, or a success, did not.
func TestGuardTellsACallCutShortByADeadline(t *testing.T) {
	var mu sync.Mutex
	var cut []sluice.Outcome
	old := shedhook.CutShort
	t.Cleanup(func() { shedhook.CutShort = old })
	shedhook.CutShort = func(p any, tk uint64, o uint8, now, latency time.Duration) bool {
		mu.Lock()
		cut = append(cut, sluice.Outcome(o))
		mu.Unlock()
		return false // the policy's Done hears it, as for any end
	}
	cuts := func() []sluice.Outcome {
		mu.Lock()
		defer mu.Unlock()
		return append([]sluice.Outcome(nil), cut...)
	}
	synctest.Test(t, func(t *testing.T) {
		br, err := breaker.New("dep")
		if err != nil {
			t.Fatal(err)
		}
		g, err := sluice.New(sluice.With(br), sluice.WithTimeout(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		_ = g.Do(ctx, func(context.Context) error { return nil })
		_ = g.Do(ctx, func(context.Context) error { return errors.New("refused") })
		if got := cuts(); len(got) != 0 {
			t.Fatalf("a success and a quick failure were told as cut short: %v", got)
		}
		err = g.Do(ctx, func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, sluice.ErrTimeout) {
			t.Fatalf("Do = %v, want the timeout", err)
		}
		short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		_ = g.Do(short, func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
		if got := cuts(); len(got) != 2 || got[0] != sluice.Failure || got[1] != sluice.Failure {
			t.Fatalf("cut short: %v, want the two calls a deadline ended, as failures", got)
		}
		if st := br.Counts(); st.Failures != 3 {
			t.Fatalf("the breaker heard %d failures, want 3: a cut call's end reaches every policy", st.Failures)
		}
	})
}
