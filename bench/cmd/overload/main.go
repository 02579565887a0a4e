// Command overload plays surges and a slow dependency against sluice's
// guards and its peers', each library in a server process of its own on
// loopback, and prints goodput, latency and rejections as a markdown table
// (and draws goodput against load in a PNG).
//
// Scenarios:
//
//   - cpu: a handler burning about 4 ms of CPU, at 0.5×, 1×, 2× and 4× of
//     the capacity the unguarded server is measured to have;
//   - pool: a handler holding one of 16 downstream connections for 20 ms;
//   - dep: two routes at 150 requests/s each sharing a dependency of 16
//     connections, which turns slow (2 s) and failing (25 %) for 5 s.
//
// Usage:
//
//	go run ./cmd/overload                                  # everything, 2 runs
//	go run ./cmd/overload -scenarios cpu -levels 4 -libs unguarded,sluice-guard -warmup 1s -duration 2s -runs 1
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

func main() {
	var (
		serveSpec = flag.String("serve", "", "run as the server `scenario/library` (used by the program itself)")
		burn      = flag.Int("burn", 0, "rounds of CPU work per half-millisecond chunk (used with -serve)")
		scenarios = flag.String("scenarios", "cpu,pool,dep", "scenarios to play: cpu, pool, dep")
		libs      = flag.String("libs", "", "libraries to play, comma-separated (default all): "+libNames())
		levels    = flag.String("levels", "0.5,1,2,4", "load levels, as multiples of capacity")
		warm      = flag.Duration("warmup", 2*time.Second, "warm-up at each level, not counted")
		dur       = flag.Duration("duration", 4*time.Second, "measured time at each level")
		runs      = flag.Int("runs", 2, "runs, the order of libraries reversed every other run; the table shows medians")
		seed      = flag.Uint64("seed", 1, "seed of the arrival schedules")
		cpuCap    = flag.Float64("cpu-capacity", 0, "capacity of the cpu scenario in requests/s (0: measure it)")
		poolCap   = flag.Float64("pool-capacity", 0, "capacity of the pool scenario in requests/s (0: measure it)")
		png       = flag.String("png", "overload.png", "chart of goodput against load (empty: none)")
		profile   = flag.String("cpuprofile", "", "write the load generator's CPU profile to `file`")
	)
	flag.Parse()
	if *serveSpec != "" {
		if err := serve(*serveSpec, *burn); err != nil {
			fmt.Fprintln(os.Stderr, "overload:", err)
			os.Exit(1)
		}
		return
	}
	cfg := defaultConfig()
	cfg.scenarios = split(*scenarios)
	cfg.libs = split(*libs)
	cfg.warm, cfg.dur, cfg.runs, cfg.seed = *warm, *dur, *runs, *seed
	cfg.capacity["cpu"], cfg.capacity["pool"] = *cpuCap, *poolCap
	cfg.progress = os.Stderr
	var err error
	if cfg.levels, err = parseLevels(*levels); err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(2)
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "overload:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
	rep.markdown(os.Stdout)
	if *png != "" {
		if err := rep.chart(*png); err != nil {
			fmt.Fprintln(os.Stderr, "overload:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "chart: %s\n", *png)
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseLevels(s string) ([]float64, error) {
	var out []float64
	for _, f := range split(s) {
		x, err := strconv.ParseFloat(f, 64)
		if err != nil || !(x >= 0.01 && x <= 100) {
			return nil, fmt.Errorf("-levels: %q is not a multiple of capacity from 0.01 to 100", f)
		}
		out = append(out, x)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-levels: no level to play in %q", s)
	}
	return out, nil
}

func libNames() string {
	seen := map[string]bool{}
	var names []string
	for _, l := range shedLibs {
		seen[l.name] = true
		names = append(names, l.name)
	}
	for _, l := range breakerLibs {
		if !seen[l.name] {
			names = append(names, l.name)
		}
	}
	return strings.Join(names, ", ")
}
