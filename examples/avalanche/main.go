// Command avalanche shows, with numbers, what sluice is for: a dependency of a
// service turns slow, and the service either falls over with it (the
// cascade) or keeps standing.
//
// It starts, on loopback, a dependency with a healthy endpoint and one that
// turns slow and failing midway, a frontend with one route on each, and an
// open-loop load on both routes. It plays the scenario twice, guarded by
// sluice and then unguarded, prints a table per phase, and writes a plot.
// Then it plays a retry storm (storm.go): callers that retry naively
// against callers that retry on sluice's budget.
//
//	go run ./examples/avalanche
//	go run ./examples/avalanche -rate 800 -plot /tmp/avalanche.png
//	go run ./examples/avalanche -dashboard   # and open the address it prints
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
)

func main() {
	cfg := DefaultConfig()
	flag.IntVar(&cfg.Rate, "rate", cfg.Rate, "requests per second offered, both routes together")
	flag.DurationVar(&cfg.Calm, "calm", cfg.Calm, "length of the calm phase")
	flag.DurationVar(&cfg.Sick, "sick", cfg.Sick, "length of the phase in which the dependency is sick")
	flag.DurationVar(&cfg.Recovered, "recovered", cfg.Recovered, "length of the phase after it healed")
	plotPath := flag.String("plot", filepath.Join(os.TempDir(), "sluice-avalanche.png"), "where to write the plot (PNG)")
	dash := flag.Bool("dashboard", false, "serve a live dashboard of the guarded run on loopback, and print its address")
	flag.Parse()
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "avalanche:", err)
		os.Exit(2)
	}
	if *dash {
		stopDashboard, err := startDashboard(&cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "avalanche:", err)
			os.Exit(1)
		}
		defer stopDashboard()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := play(ctx, cfg, *plotPath); err != nil {
		fmt.Fprintln(os.Stderr, "avalanche:", err)
		os.Exit(1)
	}
	if err := playStormPhase(ctx, cfg.guard); err != nil {
		fmt.Fprintln(os.Stderr, "avalanche: retry storm:", err)
		os.Exit(1)
	}
}

func play(ctx context.Context, cfg Config, plotPath string) error {
	fmt.Printf("playing the scenario twice, %v each: guarded by sluice, then unguarded\n", cfg.total())
	guardedRun, unguardedRun, err := playBoth(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(table(cfg, unguardedRun, guardedRun))
	if err := writePlot(plotPath, cfg, unguardedRun, guardedRun); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	fmt.Printf("\nplot: %s\n", plotPath)
	return nil
}
