package sluice_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
)

// The retry budget saves from the Guard's making: the calls that succeed
// before the first failure, and the time that passes, fund the first
// retries as they fund later ones.
func TestRetryBudgetSavesBeforeTheFirstRetry(t *testing.T) {
	fail := func(context.Context) error { return errDown }
	t.Run("calls", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g, err := sluice.New(sluice.WithRetry(sluice.Retry{Attempts: 2, Budget: 0.1, MinPerSecond: 0.001}))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			for range 1000 {
				if err := g.Do(t.Context(), func(context.Context) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			for range 5 {
				_ = g.Do(t.Context(), fail)
			}
			if s := g.Stats(); s.Retries != 5 || s.BudgetRefusals != 0 {
				t.Errorf("after 1000 calls at Budget 0.1 (10 retries saved), 5 failures got %d retries, %d refused; want 5, 0",
					s.Retries, s.BudgetRefusals)
			}
		})
	})
	t.Run("time", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g, err := sluice.New(sluice.WithRetry(sluice.Retry{Attempts: 2, Budget: 1e-9, MinPerSecond: 1}))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			time.Sleep(100 * time.Second)
			for range 5 {
				_ = g.Do(t.Context(), fail)
			}
			if s := g.Stats(); s.Retries != 5 {
				t.Errorf("after 100 s at MinPerSecond 1 (10 retries saved), 5 failures got %d retries, %d refused; want 5",
					s.Retries, s.BudgetRefusals)
			}
		})
	})
}
