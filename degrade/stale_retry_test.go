package degrade_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
)

// Each attempt of a Guard that retries runs with a context of its own: the
// first attempt's, once it has ended, stays ended, and is not the second's.
func TestStaleExecuteGivesEachAttemptItsOwnContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := sluice.New(sluice.WithRetry(sluice.Retry{Attempts: 2, MinPerSecond: 100}), sluice.WithTimeout(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		s, err := degrade.NewStale[string](time.Minute, 10)
		if err != nil {
			t.Fatal(err)
		}
		var first context.Context
		n := 0
		_, _ = s.Execute(t.Context(), g, "k", func(ctx context.Context) (string, error) {
			n++
			if n == 1 {
				first = ctx
				return "", errors.New("down")
			}
			if ctx == first {
				t.Error("the second attempt runs with the first one's context")
			}
			if first.Err() == nil {
				t.Error("the first attempt's context, its deadline cancelled, reads as live")
			}
			return "ok", nil
		})
		if n != 2 {
			t.Fatalf("%d attempts, want 2", n)
		}
	})
}

// A Guard fallback declared for another type than the Stale's is a mistake
// that Execute reports, whether or not an answer is remembered.
func TestStaleExecuteReportsAMisdeclaredFallback(t *testing.T) {
	wrong, err := degrade.New(degrade.OnError(degrade.Value(7))) // answers an int
	if err != nil {
		t.Fatal(err)
	}
	g, err := sluice.New(sluice.WithFallback(wrong))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	s, err := degrade.NewStale[string](time.Minute, 10)
	if err != nil {
		t.Fatal(err)
	}
	s.Put("k", "old")
	_, err = s.Execute(t.Context(), g, "k", func(context.Context) (string, error) { return "", errors.New("down") })
	if err == nil {
		t.Fatal("the remembered answer hid the Guard's misdeclared fallback")
	}
}
