package sluice_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/policytest"
)

// A call that a deadline ended ran at least its latency, maybe much
// longer had it been let: the Guard tells a Shedder so (through
// shedhook.CutShort), and only for such a call. Its own deadline, or its
// caller's, cut it; a failure of its own, or a success, did not.
func TestGuardTellsACallCutShortByADeadline(t *testing.T) {
	cuts := policytest.RecordCuts(t)
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

// A call begun with a context already past its deadline was not cut short
// by it: it ran its whole course (50 ms of its own work) and failed for a
// reason of its own. Its latency is a measure, and a Shedder must not hear
// it as a bound.
func TestGuardTellsNoCutOfACallBegunPastItsDeadline(t *testing.T) {
	cuts := policytest.RecordCuts(t)
	synctest.Test(t, func(t *testing.T) {
		br, err := breaker.New("dep")
		if err != nil {
			t.Fatal(err)
		}
		g, err := sluice.New(sluice.With(br)) // no Guard timeout
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
		defer cancel()
		own := errors.New("constraint violated")
		err = g.Do(ctx, func(context.Context) error {
			time.Sleep(50 * time.Millisecond) // its own work, to its end
			return own
		})
		if !errors.Is(err, own) {
			t.Fatalf("Do = %v", err)
		}
		if got := cuts(); len(got) != 0 {
			t.Errorf("a call begun past its caller's deadline, failing of its own after 50 ms, was told cut short by a deadline: %v", got)
		}
	})
}
