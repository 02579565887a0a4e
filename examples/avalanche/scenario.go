package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sluice-go/sluice/observe/dashboard"
)

// Config is one scenario: how long each phase lasts, the load, and how the
// dependency behaves.
type Config struct {
	Rate           int           // requests per second offered, both routes together
	Calm           time.Duration // phase 1: the dependency is healthy
	Sick           time.Duration // phase 2: its flaky endpoint turns slow and fails
	Recovered      time.Duration // phase 3: it has healed
	FastLatency    time.Duration // the healthy endpoint, always
	CalmLatency    time.Duration // the flaky endpoint when healthy
	SickLatency    time.Duration // the flaky endpoint when sick
	SickErrorEvery int           // when sick, every n-th call to it fails with a 500
	PoolSize       int           // the frontend's connections to the dependency (shared by both routes)
	ClientTimeout  time.Duration // how long a user waits for an answer
	// Dashboard, when not nil, shows the guarded frontend's Guards live.
	Dashboard *dashboard.Dashboard
}

// DefaultConfig is the scenario `go run ./examples/avalanche` plays.
func DefaultConfig() Config {
	return Config{
		Rate:           500,
		Calm:           8 * time.Second,
		Sick:           10 * time.Second,
		Recovered:      6 * time.Second,
		FastLatency:    10 * time.Millisecond,
		CalmLatency:    20 * time.Millisecond,
		SickLatency:    2 * time.Second,
		SickErrorEvery: 4,
		PoolSize:       64,
		ClientTimeout:  5 * time.Second,
	}
}

func (c Config) total() time.Duration { return c.Calm + c.Sick + c.Recovered }

func (c Config) validate() error {
	switch {
	case c.Rate < 2 || c.Rate > 5000:
		return fmt.Errorf("rate %d: want 2 to 5000 requests per second", c.Rate)
	case c.Calm <= 0 || c.Sick <= 0 || c.Recovered <= 0:
		return fmt.Errorf("every phase must last longer than 0")
	case c.PoolSize < 1:
		return fmt.Errorf("pool size %d: want at least 1", c.PoolSize)
	}
	return nil
}

// The frontend's two routes: one on the dependency's healthy endpoint, one on
// the endpoint that turns sick.
var (
	routePaths = [2]string{"/catalog", "/recommendations"}
	routeNames = [2]string{"healthy route", "sick route"}
)

// fallbackHeader marks an answer the fallback served.
const fallbackHeader = "X-Sluice-Fallback"

// phase names the three phases of a run.
var phaseNames = [3]string{"calm", "dependency sick", "recovered"}

// runResult is one run of the scenario.
type runResult struct {
	name     string
	samples  []sample
	gauges   []gauge
	stats    [3][2]phaseStats // [phase][route]
	peakG    [3]int
	peakHeap [3]uint64
	recovery time.Duration // from the heal until the sick route answers for real again; -1 never
}

// frontend is the service under test: it serves the two routes by calling the
// dependency through client.
type frontend interface {
	handler() http.Handler
	close()
}

func (c Config) phaseOf(at time.Duration) int {
	switch {
	case at < c.Calm:
		return 0
	case at < c.Calm+c.Sick:
		return 1
	}
	return 2
}

// run plays the scenario once against the frontend that build returns.
func run(ctx context.Context, cfg Config, name string, build func(cfg Config, depBase string, client *http.Client) (frontend, error)) (*runResult, error) {
	dep, err := startDependency(cfg)
	if err != nil {
		return nil, err
	}
	defer dep.close()
	// The frontend's connections to the dependency: one pool, bounded, shared
	// by both routes, as in most services.
	depTransport := &http.Transport{
		MaxConnsPerHost:     cfg.PoolSize,
		MaxIdleConnsPerHost: cfg.PoolSize,
		IdleConnTimeout:     30 * time.Second,
	}
	defer depTransport.CloseIdleConnections()
	fe, err := build(cfg, "http://"+dep.addr, &http.Client{Transport: depTransport})
	if err != nil {
		return nil, err
	}
	defer fe.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: fe.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = srv.Close()
	}()
	warmUp("http://"+ln.Addr().String(), cfg)

	start := time.Now()
	sickAt, healAt := cfg.Calm, cfg.Calm+cfg.Sick
	sickTimer := time.AfterFunc(sickAt, func() { dep.sick.Store(true) })
	healTimer := time.AfterFunc(healAt, func() { dep.sick.Store(false) })
	defer sickTimer.Stop()
	defer healTimer.Stop()
	samples, gauges := drive(ctx, cfg, "http://"+ln.Addr().String(), start, nil)
	if err := ctx.Err(); err != nil {
		// Cut short (Ctrl-C): no figures, rather than figures of nothing.
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	r := &runResult{name: name, samples: samples, gauges: gauges}
	var byPhase [3][2][]sample
	for _, s := range samples {
		p := cfg.phaseOf(s.at)
		byPhase[p][s.route] = append(byPhase[p][s.route], s)
	}
	for p := range 3 {
		for rt := range 2 {
			r.stats[p][rt] = stats(byPhase[p][rt])
		}
	}
	for _, g := range gauges {
		p := cfg.phaseOf(g.at)
		r.peakG[p] = max(r.peakG[p], g.goroutines)
		r.peakHeap[p] = max(r.peakHeap[p], g.heap)
	}
	// Back to normal means real answers as fast as in the calm phase again.
	r.recovery = recovery(samples, healAt, 2*r.stats[0][1].p99+5*time.Millisecond)
	return r, nil
}

// warmUp opens a few connections so the calm phase does not measure dials.
func warmUp(base string, cfg Config) {
	c := &http.Client{Timeout: time.Second}
	for i := range 20 {
		if resp, err := c.Get(base + routePaths[i%2]); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}
	c.CloseIdleConnections()
}

// recovery is the time from the heal to the first request of the sick route
// after which every one of its requests got the real answer within bound; -1
// if that never happened.
func recovery(samples []sample, healAt, bound time.Duration) time.Duration {
	firstGood := time.Duration(-1)
	for _, s := range samples {
		if s.route != 1 || s.at < healAt {
			continue
		}
		if s.class != classOK || s.latency > bound {
			firstGood = -1
			continue
		}
		if firstGood < 0 {
			firstGood = s.at
		}
	}
	if firstGood < 0 {
		return -1
	}
	return firstGood - healAt
}

// settle waits, bounded, for the goroutines a run left behind to end, so the
// next run starts from the same floor.
func settle(floor int) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && runtime.NumGoroutine() > floor+10 {
		time.Sleep(50 * time.Millisecond)
	}
	debug.FreeOSMemory()
}

func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "never"
	case d < time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(100 * time.Millisecond).String()
}

// table renders the runs side by side, phase by phase.
func table(cfg Config, runs ...*runResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "offered load: %d req/s for %v (calm %v, dependency sick %v, recovered %v)\n",
		cfg.Rate, cfg.total(), cfg.Calm, cfg.Sick, cfg.Recovered)
	fmt.Fprintf(&b, "dependency: healthy endpoint %v; flaky endpoint %v, when sick %v with 1 in %d failing; pool of %d connections\n\n",
		cfg.FastLatency, cfg.CalmLatency, cfg.SickLatency, cfg.SickErrorEvery, cfg.PoolSize)
	fmt.Fprintf(&b, "%-16s %-10s %-14s %7s %9s %9s %7s %9s %9s %9s %11s %9s\n",
		"phase", "run", "route", "ok %", "fallback%", "rejected%", "error%", "p50", "p99", "max", "goroutines", "heap MiB")
	for p := range 3 {
		for _, r := range runs {
			for rt := range 2 {
				s := r.stats[p][rt]
				g, h := "", ""
				if rt == 0 {
					g = fmt.Sprint(r.peakG[p])
					h = fmt.Sprintf("%.1f", float64(r.peakHeap[p])/(1<<20))
				}
				fmt.Fprintf(&b, "%-16s %-10s %-14s %7.1f %9.1f %9.1f %7.1f %9s %9s %9s %11s %9s\n",
					phaseNames[p], r.name, routeNames[rt], s.ok, s.fallback, s.rejected, s.failed,
					fmtDur(s.p50), fmtDur(s.p99), fmtDur(s.max), g, h)
			}
		}
	}
	b.WriteString("\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "%-10s sick route back to real answers %s after the dependency healed\n", r.name, fmtRecovery(r.recovery))
	}
	return b.String()
}

func fmtRecovery(d time.Duration) string {
	if d < 0 {
		return "never (within the run)"
	}
	return fmtDur(d)
}

// playBoth plays the scenario guarded, then unguarded. The guarded run goes
// first so that its memory and goroutine figures start from a clean process:
// the unguarded run leaves thousands of goroutines and their buffers behind.
func playBoth(ctx context.Context, cfg Config) (guardedRun, unguardedRun *runResult, err error) {
	floor := runtime.NumGoroutine()
	if guardedRun, err = run(ctx, cfg, "sluice", newGuarded); err != nil {
		return nil, nil, err
	}
	settle(floor)
	if unguardedRun, err = run(ctx, cfg, "unguarded", newUnguarded); err != nil {
		return nil, nil, err
	}
	settle(floor)
	return guardedRun, unguardedRun, nil
}
