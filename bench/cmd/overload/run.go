package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"time"
)

// config is one invocation of the program.
type config struct {
	scenarios []string
	libs      []string // empty: all
	levels    []float64
	warm, dur time.Duration
	runs      int
	seed      uint64
	// capacity of the surge scenarios in requests/s; 0: measure it.
	capacity         map[string]float64
	capWarm, capDur  time.Duration
	depRate          float64 // per route
	depWarm, depSick time.Duration
	depAfter         time.Duration
	exe              string   // the server program; default this one
	exeArgs          []string // put before the server's flags
	progress         io.Writer
}

func defaultConfig() config {
	return config{
		scenarios: []string{"cpu", "pool", "dep"},
		levels:    []float64{0.5, 1, 2, 4},
		warm:      2 * time.Second,
		dur:       4 * time.Second,
		runs:      2,
		seed:      1,
		capacity:  map[string]float64{},
		capWarm:   time.Second,
		capDur:    3 * time.Second,
		depRate:   150,
		depWarm:   2 * time.Second,
		depSick:   5 * time.Second,
		depAfter:  4 * time.Second,
		progress:  io.Discard,
	}
}

// levelStats is one library at one load level in one run.
type levelStats struct {
	goodput  float64 // answers within the objective per second, % of capacity
	p99      float64 // ms, of the requests not rejected (unanswered ones at clientTimeout); -1: none was admitted
	rejected float64 // % of the requests
	// shed is how many requests were rejected in the whole play, warm-up
	// included.
	shed int
}

// depStatsRun is one library in the slow-dependency scenario in one run.
type depResult struct {
	openMs    float64 // from sick until a breaker first refused a call; -1: never
	sickCalls float64 // calls sent into the sick dependency
	fallback  float64 // % of the requests due while sick answered by a fallback
	recoverMs float64 // from healed until answers came from the dependency again; -1: not within the run
}

// report holds every measurement of a run of the program.
type report struct {
	cfg      config
	perChunk int
	capacity map[string]float64
	shed     map[string]map[string][][]levelStats // scenario → library → level → runs
	dep      map[string][]depResult               // library → runs
	genCPU   map[string][]float64                 // scenario → cores used by the generator, per play
	steal    map[string][]float64                 // scenario → % of the machine's CPU stolen, per play (when known)
}

func (c config) wants(name string) bool {
	return len(c.libs) == 0 || slices.Contains(c.libs, name)
}

func (c config) scenario(s string) bool { return slices.Contains(c.scenarios, s) }

func run(cfg config) (*report, error) {
	if cfg.exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.exe = exe
	}
	for _, s := range cfg.scenarios {
		if s != "cpu" && s != "pool" && s != "dep" {
			return nil, fmt.Errorf("no scenario %q", s)
		}
	}
	switch {
	case cfg.runs < 1:
		return nil, fmt.Errorf("-runs %d: at least 1", cfg.runs)
	case cfg.dur <= 0:
		return nil, fmt.Errorf("-duration %v: it must be positive", cfg.dur)
	case cfg.warm < 0:
		return nil, fmt.Errorf("-warmup %v: it must not be negative", cfg.warm)
	}
	for sc, c := range cfg.capacity {
		if n := shotsOf(c*slices.Max(append([]float64{0}, cfg.levels...)), cfg.warm+cfg.dur); n > maxShots {
			return nil, fmt.Errorf("-%s-capacity %v at level %v for %v: %.0f arrivals, past the %d a play may have", sc, c, slices.Max(cfg.levels), cfg.warm+cfg.dur, n, maxShots)
		}
		if !(c >= 0 && c <= 1e6) {
			return nil, fmt.Errorf("-%s-capacity %v: a rate of requests/s up to a million, or 0 to measure it", sc, c)
		}
	}
	for _, l := range cfg.libs {
		if _, ok := findShed(l); !ok {
			if _, ok := findBreaker(l); !ok {
				return nil, fmt.Errorf("no library %q (have %s)", l, libNames())
			}
		}
	}
	// The generator keeps thousands of requests in flight; collecting less
	// often keeps its own CPU down, and it has memory to spare.
	defer debug.SetGCPercent(debug.SetGCPercent(800))
	rep := &report{
		cfg:      cfg,
		perChunk: calibrate(),
		capacity: map[string]float64{},
		shed:     map[string]map[string][][]levelStats{},
		dep:      map[string][]depResult{},
		genCPU:   map[string][]float64{},
		steal:    map[string][]float64{},
	}
	fmt.Fprintf(cfg.progress, "CPU work: %d rounds per half-millisecond chunk\n", rep.perChunk)
	for _, sc := range []string{"cpu", "pool"} {
		if !cfg.scenario(sc) {
			continue
		}
		capacity := cfg.capacity[sc]
		if capacity <= 0 {
			var err error
			if capacity, err = rep.measureCapacity(sc); err != nil {
				return nil, err
			}
		}
		rep.capacity[sc] = capacity
		fmt.Fprintf(cfg.progress, "%s: capacity %.0f requests/s\n", sc, capacity)
		rep.shed[sc] = map[string][][]levelStats{}
	}
	for r := range cfg.runs {
		for _, sc := range []string{"cpu", "pool"} {
			if !cfg.scenario(sc) {
				continue
			}
			libs := slices.Clone(shedLibs)
			if r%2 == 1 {
				slices.Reverse(libs)
			}
			for _, lib := range libs {
				if !cfg.wants(lib.name) {
					continue
				}
				per := rep.shed[sc][lib.name]
				if per == nil {
					per = make([][]levelStats, len(cfg.levels))
					rep.shed[sc][lib.name] = per
				}
				for li, level := range cfg.levels {
					st, err := rep.playLevel(sc, lib.name, li, level)
					if err != nil {
						return nil, err
					}
					per[li] = append(per[li], st)
					fmt.Fprintf(cfg.progress, "run %d %s %-18s %4.1f×: goodput %5.1f%% p99 %6.1f ms rejected %5.1f%% (generator %.2f cores%s)\n",
						r+1, sc, lib.name, level, st.goodput, st.p99, st.rejected, rep.genCPU[sc][len(rep.genCPU[sc])-1], rep.lastSteal(sc))
				}
			}
		}
		if cfg.scenario("dep") {
			libs := slices.Clone(breakerLibs)
			if r%2 == 1 {
				slices.Reverse(libs)
			}
			for _, lib := range libs {
				if !cfg.wants(lib.name) {
					continue
				}
				d, err := rep.playDependency(lib.name)
				if err != nil {
					return nil, err
				}
				rep.dep[lib.name] = append(rep.dep[lib.name], d)
				fmt.Fprintf(cfg.progress, "run %d dep %-12s open %6.0f ms, %4.0f calls sick, fallback %5.1f%%, recovered %6.0f ms\n",
					r+1, lib.name, d.openMs, d.sickCalls, d.fallback, d.recoverMs)
			}
		}
	}
	return rep, nil
}

func (rep *report) start(scenario, lib string) (*child, error) {
	args := append(slices.Clone(rep.cfg.exeArgs), serveArgs(scenario, lib, rep.perChunk)...)
	return startChild(rep.cfg.exe, args)
}

// measureCapacity runs the unguarded server closed-loop: enough callers to
// keep it busy, each sending its next request when the last is answered.
func (rep *report) measureCapacity(scenario string) (float64, error) {
	c, err := rep.start(scenario, "unguarded")
	if err != nil {
		return 0, err
	}
	defer c.stop()
	client := newClient()
	defer client.CloseIdleConnections()
	workers := 8
	if scenario == "pool" {
		workers = 2 * poolConns
	}
	capacity := closedLoop(client, c.base+"/work", workers, rep.cfg.capWarm, rep.cfg.capDur)
	if capacity*rep.cfg.capDur.Seconds() < 10 {
		return 0, fmt.Errorf("%s: the unguarded server answered %.1f requests/s: no capacity to play levels of", scenario, capacity)
	}
	return capacity, nil
}

// maxShots bounds the arrivals of one play: a schedule is held whole, 16
// bytes an arrival.
const maxShots = 20_000_000

// shotsOf is about how many arrivals a play at rate for d has.
func shotsOf(rate float64, d time.Duration) float64 { return rate * d.Seconds() }

// playLevel plays one level of a surge scenario against a fresh server.
func (rep *report) playLevel(scenario, lib string, li int, level float64) (levelStats, error) {
	c, err := rep.start(scenario, lib)
	if err != nil {
		return levelStats{}, err
	}
	defer c.stop()
	client := newClient()
	defer client.CloseIdleConnections()
	capacity := rep.capacity[scenario]
	rate := level * capacity
	if n := shotsOf(rate, rep.cfg.warm+rep.cfg.dur); n > maxShots {
		return levelStats{}, fmt.Errorf("%s at %v× of %.0f requests/s: %.0f arrivals, past the %d a play may have", scenario, level, capacity, n, maxShots)
	}
	predial(client, c.base, min(int(rate/10)+8, 256))
	shots := poisson(rate, rep.cfg.warm+rep.cfg.dur, rep.cfg.seed+uint64(li), 0)
	meter, stolen := startCPU(), startSteal()
	res, _ := fire(client, c.base, []string{"/work"}, shots, nil)
	rep.genCPU[scenario] = append(rep.genCPU[scenario], meter.cores())
	rep.noteSteal(scenario, stolen)
	return surgeStats(res, rep.cfg.warm, rep.cfg.dur, capacity), nil
}

func surgeStats(res []result, warm, dur time.Duration, capacity float64) levelStats {
	var good, rejected, n, shed int
	var lats []time.Duration
	for _, r := range res {
		if r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable {
			shed++
		}
		if r.due < warm || r.due >= warm+dur {
			continue
		}
		n++
		switch {
		case r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable:
			rejected++
			continue
		case r.status == http.StatusOK && r.lat <= objective:
			good++
		}
		lats = append(lats, r.lat)
	}
	st := levelStats{goodput: float64(good) / dur.Seconds() / capacity * 100, shed: shed}
	if n > 0 {
		st.rejected = float64(rejected) / float64(n) * 100
	}
	st.p99 = -1
	if len(lats) > 0 {
		slices.Sort(lats)
		// Nearest rank: the ⌈0.99·n⌉-th of n.
		st.p99 = float64(lats[(len(lats)*99+99)/100-1]) / float64(time.Millisecond)
	}
	return st
}

// playDependency plays the slow-dependency scenario against a fresh server.
func (rep *report) playDependency(lib string) (depResult, error) {
	c, err := rep.start("dep", lib)
	if err != nil {
		return depResult{}, err
	}
	defer c.stop()
	client := newClient()
	defer client.CloseIdleConnections()
	cfg := rep.cfg
	predial(client, c.base, 64)
	total := cfg.depWarm + cfg.depSick + cfg.depAfter
	shots := merge(poisson(cfg.depRate, total, cfg.seed, 0), poisson(cfg.depRate, total, cfg.seed+100, 1))
	ctl := func(sick string) func() {
		return func() {
			resp, err := client.Get(c.base + "/ctl?sick=" + sick)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		}
	}
	hooks := []hook{{cfg.depWarm, ctl("1")}, {cfg.depWarm + cfg.depSick, ctl("0")}}
	meter, stolen := startCPU(), startSteal()
	res, ran := fire(client, c.base, []string{"/" + routeA, "/" + routeB}, shots, hooks)
	rep.genCPU["dep"] = append(rep.genCPU["dep"], meter.cores())
	rep.noteSteal("dep", stolen)

	resp, err := client.Get(c.base + "/stats")
	if err != nil {
		return depResult{}, err
	}
	defer resp.Body.Close()
	var st depStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return depResult{}, fmt.Errorf("%s /stats: %w", lib, err)
	}
	d := depResult{openMs: st.FirstOpenMs, sickCalls: float64(st.SickCalls), recoverMs: -1}
	sickAt, healAt := ran[0], ran[1]
	var sick, fb int
	for _, r := range res {
		if r.due >= sickAt && r.due < healAt {
			sick++
			if r.answer == ansFallback.String() {
				fb++
			}
		}
	}
	if sick > 0 {
		d.fallback = float64(fb) / float64(sick) * 100
	}
	d.recoverMs = recovery(res, healAt, total)
	return d, nil
}

// recovery is the time from healAt to the start of the first 500 ms in
// which every 100 ms had at least 90 % of its requests answered by the
// dependency within the objective; -1 if there was none before end.
func recovery(res []result, healAt, end time.Duration) float64 {
	const bucket, need = 100 * time.Millisecond, 5
	nb := int((end - healAt) / bucket)
	if nb <= 0 {
		return -1
	}
	good, all := make([]int, nb), make([]int, nb)
	for _, r := range res {
		if r.due < healAt {
			continue
		}
		b := int((r.due - healAt) / bucket)
		if b >= nb {
			continue
		}
		all[b]++
		if r.status == http.StatusOK && r.answer == ansOK.String() && r.lat <= objective {
			good[b]++
		}
	}
	run := 0
	for b := range nb {
		if all[b] > 0 && float64(good[b]) >= 0.9*float64(all[b]) {
			run++
			if run == need {
				return float64(time.Duration(b-need+1)*bucket) / float64(time.Millisecond)
			}
		} else {
			run = 0
		}
	}
	return -1
}

// noteSteal keeps the steal of a play of scenario that m measured, when
// the machine tells it.
func (rep *report) noteSteal(scenario string, m stealMeter) {
	if p := m.percent(); p >= 0 {
		rep.steal[scenario] = append(rep.steal[scenario], p)
	}
}

// lastSteal is the steal of the last play of scenario, for the progress
// line; empty when unknown.
func (rep *report) lastSteal(scenario string) string {
	if s := rep.steal[scenario]; len(s) > 0 {
		return fmt.Sprintf(", steal %.1f%%", s[len(s)-1])
	}
	return ""
}
