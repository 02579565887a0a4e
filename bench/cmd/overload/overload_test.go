package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sentinelcb "github.com/alibaba/sentinel-golang/core/circuitbreaker"
)

// TestMain lets the test binary serve as the program's server process, as
// the program itself does when started with -serve.
func TestMain(m *testing.M) {
	var spec string
	var burn int
	for _, a := range os.Args[1:] {
		if v, ok := strings.CutPrefix(a, "-serve="); ok {
			spec = v
		}
		if v, ok := strings.CutPrefix(a, "-burn="); ok {
			burn, _ = strconv.Atoi(v)
		}
	}
	if spec != "" {
		if err := serve(spec, burn); err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSmokeSurge plays a short CPU-bound surge at 4× against the unguarded
// server and sluice's load shedder. It checks that the
// program runs end to end and that sluice sheds under 4×; it asserts no
// timing, which a shared machine could not keep.
func TestSmokeSurge(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	cfg := defaultConfig()
	cfg.scenarios = []string{"cpu"}
	cfg.libs = []string{"unguarded", sluiceShedderLib.name}
	cfg.levels = []float64{4}
	cfg.warm, cfg.dur, cfg.runs = 300*time.Millisecond, 700*time.Millisecond, 1
	cfg.capWarm, cfg.capDur = 200*time.Millisecond, 500*time.Millisecond
	cfg.exe = os.Args[0]
	rep, err := run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.markdown(&b)
	t.Log("\n" + b.String())
	if rep.capacity["cpu"] <= 0 {
		t.Fatalf("capacity %v", rep.capacity["cpu"])
	}
	for _, lib := range cfg.libs {
		if got := len(rep.shed["cpu"][lib][0]); got != 1 {
			t.Fatalf("%s: %d results, want 1", lib, got)
		}
	}
	for _, lib := range cfg.libs {
		t.Logf("%s: %d requests rejected", lib, rep.shed["cpu"][lib][0][0].shed)
	}
	if n := rep.shed["cpu"]["unguarded"][0][0].shed; n != 0 {
		t.Errorf("unguarded: %d requests rejected, want none", n)
	}
	if n := rep.shed["cpu"][sluiceShedderLib.name][0][0].shed; n == 0 {
		t.Errorf("%s rejected nothing at 4× capacity", sluiceShedderLib.name)
	}
}

func TestRecovery(t *testing.T) {
	ms := time.Millisecond
	ok := func(due time.Duration) result { return result{due: due, lat: 20 * ms, status: 200, answer: "ok"} }
	fb := func(due time.Duration) result { return result{due: due, lat: ms, status: 200, answer: "fallback"} }
	var res []result
	for d := time.Duration(0); d < 2*time.Second; d += 10 * ms {
		if d < 300*ms {
			res = append(res, fb(d))
		} else {
			res = append(res, ok(d))
		}
	}
	if got := recovery(res, 0, 2*time.Second); got != 300 {
		t.Fatalf("recovery %v ms, want 300", got)
	}
	if got := recovery(res[:20], 0, 200*ms); got != -1 {
		t.Fatalf("recovery %v ms, want -1", got)
	}
}

func TestSurgeStats(t *testing.T) {
	ms := time.Millisecond
	res := []result{
		{due: 0, lat: 10 * ms, status: 200},         // warm-up: not counted
		{due: 100 * ms, lat: 10 * ms, status: 200},  // good
		{due: 200 * ms, lat: 300 * ms, status: 200}, // late
		{due: 300 * ms, lat: 1000 * ms},             // unanswered
		{due: 400 * ms, lat: ms, status: 503},       // rejected
		{due: 1100 * ms, lat: 10 * ms, status: 200}, // after: not counted
	}
	st := surgeStats(res, 100*ms, time.Second, 1)
	if st.goodput != 100 || st.rejected != 25 || st.p99 != 1000 || st.shed != 1 {
		t.Fatalf("%+v", st)
	}
}

// The steal a play reports is a share of the machine's time, or unknown.
func TestStealIsAShare(t *testing.T) {
	m := startSteal()
	time.Sleep(100 * time.Millisecond) // ten clock ticks of each processor, busy or idle
	p := m.percent()
	if _, _, ok := machineTicks(); !ok {
		if p != -1 {
			t.Fatalf("no /proc/stat, steal %v, want -1", p)
		}
		return
	}
	if p < 0 || p > 100 {
		t.Fatalf("steal %v%%, want within 0–100", p)
	}
}

// A time to open or recover that some runs never saw is the median of the
// runs that saw it, with how many did not: one of -1 (never) would average
// a figure no run measured.
func TestOrNeverAveragesOnlyWhatHappened(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want string
	}{
		{[]float64{400, -1}, "400 (never in 1 of 2 runs)"},
		{[]float64{400, 600}, "500"},
		{[]float64{-1, -1, 300}, "never"},
		{[]float64{-1}, "never"},
	} {
		if got := orNever(c.xs, "never"); got != c.want {
			t.Errorf("orNever(%v) = %q, want %q", c.xs, got, c.want)
		}
	}
}

// Sentinel-Go's breaker counts over the sliding window of its documented
// examples (5 s in 10 buckets), not one 10 s window that starts afresh at
// every multiple of 10 s of the wall clock, which made its time to open
// depend on where the sick spell fell.
func TestSentinelBreakerCountsOverASlidingWindow(t *testing.T) {
	if _, err := sentinelCaller(newDependency()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sentinelDir) })
	for _, route := range []string{routeA, routeB} {
		for _, r := range sentinelcb.GetRulesOfResource(route) {
			if r.StatIntervalMs != 5000 || r.StatSlidingWindowBucketCount != 10 {
				t.Errorf("route %s: %d ms in %d buckets, want 5000 in 10", route, r.StatIntervalMs, r.StatSlidingWindowBucketCount)
			}
		}
	}
}
