package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// Retry.Budget "is the share of the Guard's calls that retries may add":
// a burst of 100 concurrent calls that all fail, on a Budget of 0.5, may
// add about 50 retries, not the 10 the budget saves over idle time.
func TestRetryBudgetShareHoldsForABurstOfConcurrentFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := sluice.New(sluice.WithRetry(sluice.Retry{
			Attempts: 2, Backoff: time.Millisecond, Budget: 0.5, MinPerSecond: 1e-9,
		}))
		if err != nil {
			t.Fatal(err)
		}
		const n = 100
		failTogether(g, n)
		s := g.Stats()
		t.Logf("%d calls, %d attempts, %d retries, %d refused", n, s.Attempts, s.Retries, s.BudgetRefusals)
		if s.Retries < n/2/2 {
			t.Errorf("a Budget of 0.5 gave %d retries to %d failed calls: want about %d, at least %d", s.Retries, n, n/2, n/2/2)
		}
	})
}

// The calls of an hour of health do not buy a storm: the budget saves the
// share of about the last ten seconds' calls, so a burst of 200 failing
// calls after an hour at one call a second gets about a tenth of its own
// number of retries, not a tenth of the hour's.
func TestRetryBudgetSavesOnlyRecentCallsShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := sluice.New(sluice.WithRetry(sluice.Retry{Attempts: 2, Backoff: time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		for range 3600 {
			_ = g.Do(context.Background(), func(context.Context) error { return nil })
			time.Sleep(time.Second)
		}
		const n = 200
		failTogether(g, n)
		if s := g.Stats(); s.Retries > 30 {
			t.Errorf("an hour of health bought %d retries for a burst of %d failures: want about 21", s.Retries, n)
		}
	})
}

// failTogether runs n calls through g that are all in flight before any
// fails, and fail every attempt.
func failTogether(g *sluice.Guard, n int) {
	boom := errors.New("boom")
	var began sync.WaitGroup
	began.Add(n)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			tries := 0
			_ = g.Do(context.Background(), func(context.Context) error {
				if tries++; tries == 1 {
					began.Done()
					<-release
				}
				return boom
			})
		})
	}
	began.Wait()
	close(release)
	wg.Wait()
}

// A client healthy before a storm retries, over the storm's first ten
// seconds, about Budget's share of its calls, MinPerSecond × 10 s and the
// 10 saved: the calls of its health buy it at most one second's share more
// (a margin of half the Budget's share is allowed).
func TestARetryStormAfterHealthStaysWithinBudget(t *testing.T) {
	for _, rate := range []int{100, 1000} {
		t.Run(fmt.Sprintf("%d per second", rate), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const budget, floor = 0.1, 1.0
				g, err := sluice.New(sluice.WithRetry(sluice.Retry{Attempts: 2, Backoff: time.Microsecond, Budget: budget, MinPerSecond: floor}))
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				step := time.Second / time.Duration(rate)
				for range 60 * rate { // a minute of health
					_ = g.Do(t.Context(), func(context.Context) error { return nil })
					time.Sleep(step)
				}
				before := g.Stats().Retries
				boom := errors.New("boom")
				calls := 10 * rate // then ten seconds of storm: every call fails
				for range calls {
					_ = g.Do(t.Context(), func(context.Context) error { return boom })
					time.Sleep(step)
				}
				retries := g.Stats().Retries - before
				allowed := budget*float64(calls) + floor*10 + 10
				if float64(retries) > allowed+budget*float64(calls)/2 {
					t.Errorf("a 10 s storm of %d failing calls after a minute of health got %d retries (%.0f%% of its calls); Budget %.1f and MinPerSecond %.0f allow about %.0f",
						calls, retries, 100*float64(retries)/float64(calls), budget, floor, allowed)
				}
			})
		})
	}
}
