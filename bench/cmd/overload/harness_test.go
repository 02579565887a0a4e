package main

import (
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// closedPort is a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// README: "p99: of the requests not rejected, those never answered counted
// at 1 s", a request that fails at once (connection refused or reset: no
// answer at all) among them, which would otherwise pull the p99 down.
func TestUnansweredRequestsCountAtClientTimeout(t *testing.T) {
	client := newClient()
	defer client.CloseIdleConnections()
	base := "http://" + closedPort(t)
	var shots []shot
	for i := range 20 {
		shots = append(shots, shot{at: time.Duration(i) * time.Millisecond})
	}
	res, _ := fire(client, base, []string{"/work"}, shots, nil)
	for _, r := range res {
		if r.status != 0 {
			t.Fatalf("status %d from a closed port", r.status)
		}
	}
	st := surgeStats(res, 0, time.Second, 1)
	if st.p99 != float64(clientTimeout/time.Millisecond) {
		t.Fatalf("p99 %.3f ms for requests that were never answered, want %v (the client timeout)", st.p99, clientTimeout.Milliseconds())
	}
}

// -levels refuses NaN and Inf, at which poisson would never return.
func TestLevelsRefuseNaNAndInf(t *testing.T) {
	for _, s := range []string{"NaN", "Inf", "+Inf"} {
		if lv, err := parseLevels(s); err == nil {
			t.Errorf("parseLevels(%q) = %v, nil; want an error", s, lv)
		}
	}
}

// A capacity that could not be measured (a server that answers nothing) is
// an error, not 0 requests/s to play levels of.
func TestCapacityOfADeadServerIsAnError(t *testing.T) {
	addr := closedPort(t)
	cfg := defaultConfig()
	cfg.capWarm, cfg.capDur = 20*time.Millisecond, 50*time.Millisecond
	// A "server" that says where it listens (nowhere) and waits for its
	// standard input to close, as a child does.
	cfg.exe = "/bin/sh"
	cfg.exeArgs = []string{"-c", "echo listening " + addr + "; cat >/dev/null", "sh"}
	rep := &report{cfg: cfg, perChunk: 1}
	capacity, err := rep.measureCapacity("pool")
	if err == nil {
		t.Fatalf("capacity %v requests/s and no error from a server that answered nothing", capacity)
	}
}

// The p99 is the nearest rank: of 100 admitted requests the 99th, not the
// maximum.
func TestP99OfAHundredIsTheNinetyNinth(t *testing.T) {
	ms := time.Millisecond
	var res []result
	for i := range 100 {
		lat := 10 * ms
		if i == 99 {
			lat = 900 * ms // one slow request of a hundred
		}
		res = append(res, result{due: time.Duration(i) * ms, lat: lat, status: http.StatusOK})
	}
	st := surgeStats(res, 0, time.Second, 100)
	if st.p99 != 10 {
		t.Fatalf("p99 of 99 requests at 10 ms and one at 900 ms: %v ms, want 10 (the 99th of 100)", st.p99)
	}
}

// A measured duration of zero (goodput 0/0) and zero runs (empty tables)
// are errors.
func TestRunRefusesNonsenseDurationsAndRuns(t *testing.T) {
	base := func() config {
		cfg := defaultConfig()
		cfg.scenarios = []string{"pool"}
		cfg.libs = []string{"unguarded"}
		cfg.levels = []float64{1}
		cfg.capacity["pool"] = 100
		cfg.warm, cfg.dur, cfg.runs = 0, 0, 1
		cfg.exe = os.Args[0]
		return cfg
	}
	t.Run("duration 0", func(t *testing.T) {
		rep, err := run(base())
		if err != nil {
			return
		}
		var b strings.Builder
		rep.markdown(&b)
		if g := rep.shed["pool"]["unguarded"][0][0].goodput; math.IsNaN(g) || strings.Contains(b.String(), "NaN") {
			t.Fatalf("no error for -duration 0; goodput %v:\n%s", g, b.String())
		}
	})
	t.Run("runs 0", func(t *testing.T) {
		cfg := base()
		cfg.dur, cfg.runs = time.Second, 0
		rep, err := run(cfg)
		if err == nil {
			var b strings.Builder
			rep.markdown(&b)
			t.Fatalf("no error for -runs 0:\n%s", b.String())
		}
	})
}

// -levels "" (or ","), no level at all, is an error, as zero runs are: it
// would play nothing and print tables with no column.
func TestLevelsRefuseAnEmptyList(t *testing.T) {
	for _, s := range []string{"", ",", " , "} {
		if lv, err := parseLevels(s); err == nil {
			t.Errorf("parseLevels(%q) = %v, nil; want an error (no level to play)", s, lv)
		}
	}
}

// A schedule no memory holds (a capacity of a million at level 100 for
// 10 s: 1e9 arrivals) is refused before anything is built.
func TestRunRefusesAScheduleNoMemoryHolds(t *testing.T) {
	cfg := defaultConfig()
	cfg.scenarios = []string{"pool"}
	cfg.libs = []string{"unguarded"}
	cfg.levels = []float64{100}
	cfg.capacity["pool"] = 1e6
	cfg.warm, cfg.dur, cfg.runs = 0, 10*time.Second, 1
	cfg.exe = os.Args[0]
	_, err := run(cfg)
	if err == nil || !strings.Contains(err.Error(), "arrivals") {
		t.Fatalf("a schedule of 1e9 arrivals: %v", err)
	}
}
