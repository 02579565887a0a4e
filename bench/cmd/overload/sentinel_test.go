package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/alibaba/sentinel-golang/core/system"
	"github.com/alibaba/sentinel-golang/core/system_metric"
)

// The Sentinel row is labelled "always on": its CPU rule's trigger (0.8,
// Sentinel refuses one past 1) is compared with the process's CPU in
// percent (100 for a busy core), so BBR runs from the first request. Should
// a Sentinel-Go release read CPU as a share, this fails, and the label and
// bench/README must change.
func TestSentinelsCPURuleIsAlwaysOn(t *testing.T) {
	if _, err := sentinelShed(func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sentinelDir) })
	var trigger float64
	for _, r := range system.GetRules() {
		if r.MetricType == system.CpuUsage {
			trigger = r.TriggerCount
		}
	}
	if trigger == 0 {
		t.Fatal("no CpuUsage rule loaded")
	}
	// Keep one core busy (half of a 2-core machine) until Sentinel's
	// collector, every second, has read the process's CPU twice.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				spin(10000)
			}
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	var usage float64
	for time.Now().Before(deadline) {
		if usage = system_metric.CurrentCpuUsage(); usage > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	<-done
	if usage <= trigger {
		t.Fatalf("Sentinel's CPU usage reads %.2f with one core busy, against the trigger %v: "+
			"its rule is no longer always on; relabel the row", usage, trigger)
	}
}
