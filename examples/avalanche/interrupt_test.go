package main

import (
	"context"
	"testing"
	"time"
)

// Ctrl-C (signal.NotifyContext) cuts a play short: it ends with an error,
// so the program prints no table of zeros as if it had measured them, keeps
// the plot it had, and exits 1.
func TestAnInterruptedScenarioIsAnError(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Calm, cfg.Sick, cfg.Recovered = time.Second, time.Second, time.Second
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Ctrl-C before the first request
	g, u, err := playBoth(ctx, cfg)
	if err == nil {
		t.Errorf("an interrupted scenario returned no error, and results: guarded %d samples, unguarded %d", len(g.samples), len(u.samples))
	}
}

// So does the retry storm's.
func TestAnInterruptedStormIsAnError(t *testing.T) {
	cfg := defaultStorm()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	naive, guarded, err := playStorm(ctx, cfg)
	if err == nil {
		t.Errorf("an interrupted retry storm returned no error, and results: naive %v calls, sluice %v calls", naive.calls, guarded.calls)
	}
}
