package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
)

// The retry storm: callers that retry every failure turn a dependency's
// slow minute into a standing overload. The dependency serves a few calls
// at a time and queues the rest, and it does the work of every call it
// queued, even those whose caller gave up: the classic metastable failure.
// While it is slow, the naive callers' retries triple its load; once it is
// fast again, that load is still above what it can serve, so its queue
// never drains. sluice's callers retry on a budget (10% of their calls) and
// stop calling while their breaker is open, so it recovers as soon as it
// heals.

// stormConfig is one play of the retry storm.
type stormConfig struct {
	Rate        int           // calls per second, from each group of callers
	Calm        time.Duration // phase 1: the dependency is healthy
	Slow        time.Duration // phase 2: it is slow
	After       time.Duration // phase 3: it has healed
	Workers     int           // calls the dependency serves at once; the rest queue
	Service     time.Duration // how long it takes to serve one call
	SlowService time.Duration // the same, while it is slow
	Attempt     time.Duration // how long a caller waits for one attempt
	Deadline    time.Duration // how long a caller waits for its call, attempts included
	// Guard gives each Guard of sluice's callers its name and the
	// dashboard's observer when a dashboard is served (Config.guard).
	Guard func(name string) []sluice.Option
}

// defaultStorm is the storm `go run ./examples/avalanche` plays: the
// dependency serves 400 calls a second when healthy, 80 when slow, against
// 200 offered by each group of callers.
func defaultStorm() stormConfig {
	return stormConfig{
		Rate: 200, Calm: 2 * time.Second, Slow: 2 * time.Second, After: 4 * time.Second,
		Workers: 4, Service: 10 * time.Millisecond, SlowService: 50 * time.Millisecond,
		Attempt: 200 * time.Millisecond, Deadline: time.Second,
	}
}

func (c stormConfig) total() time.Duration { return c.Calm + c.Slow + c.After }

func (c stormConfig) phaseOf(at time.Duration) int {
	return Config{Calm: c.Calm, Sick: c.Slow}.phaseOf(at)
}

var stormPhases = [3]string{"calm", "dependency slow", "healed"}

// stormDependency serves Workers calls at a time, each in Service (or
// SlowService), first come first served; it notes when each call arrived
// and how long it took to answer, queue included.
type stormDependency struct {
	cfg     stormConfig
	start   time.Time
	slow    atomic.Bool
	slots   chan struct{}
	closing chan struct{}
	queued  atomic.Int64
	srv     *http.Server
	addr    string

	mu       sync.Mutex
	arrivals []time.Duration // since start
	served   []served
	queueMax [3]int64
}

// served is one call the dependency answered.
type served struct{ at, latency time.Duration }

func startStormDependency(cfg stormConfig) (*stormDependency, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &stormDependency{cfg: cfg, slots: make(chan struct{}, cfg.Workers), closing: make(chan struct{}), addr: ln.Addr().String()}
	d.srv = &http.Server{Handler: http.HandlerFunc(d.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = d.srv.Serve(ln) }()
	return d, nil
}

func (d *stormDependency) serve(w http.ResponseWriter, _ *http.Request) {
	arrived := time.Since(d.start)
	q := d.queued.Add(1)
	d.mu.Lock()
	d.arrivals = append(d.arrivals, arrived)
	p := d.cfg.phaseOf(arrived)
	d.queueMax[p] = max(d.queueMax[p], q)
	d.mu.Unlock()
	// The work is queued: it is done whether or not its caller still waits.
	select {
	case d.slots <- struct{}{}:
	case <-d.closing:
		return
	}
	d.queued.Add(-1)
	service := d.cfg.Service
	if d.slow.Load() {
		service = d.cfg.SlowService
	}
	t := time.NewTimer(service)
	select {
	case <-t.C:
	case <-d.closing:
		t.Stop()
	}
	<-d.slots
	d.mu.Lock()
	d.served = append(d.served, served{at: arrived, latency: time.Since(d.start) - arrived})
	d.mu.Unlock()
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func (d *stormDependency) close() {
	close(d.closing)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = d.srv.Shutdown(ctx)
	_ = d.srv.Close()
}

// stormClient makes one call to the dependency at url, attempts included.
type stormClient struct {
	name  string
	call  func(ctx context.Context, url string) error
	close func()
}

var errNotOK = errors.New("dependency answered other than 200")

// fetch sends one GET to url and reads the answer.
func fetch(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return errNotOK
	}
	return nil
}

func stormTransport() *http.Transport {
	return &http.Transport{MaxIdleConnsPerHost: 512, IdleConnTimeout: 30 * time.Second}
}

// naiveClient retries every failed attempt at once, as many clients are
// first written: 3 attempts, 10 ms apart, each given cfg.Attempt.
func naiveClient(cfg stormConfig) stormClient {
	tr := stormTransport()
	c := &http.Client{Transport: tr}
	call := func(ctx context.Context, url string) error {
		var err error
		for i := range 3 {
			if i > 0 && !pause(ctx, 10*time.Millisecond) {
				return err
			}
			actx, cancel := context.WithTimeout(ctx, cfg.Attempt)
			err = fetch(actx, c, url)
			cancel()
			if err == nil || ctx.Err() != nil {
				return err
			}
		}
		return err
	}
	return stormClient{name: "naive", call: call, close: tr.CloseIdleConnections}
}

// sluiceClient calls through sluice's Transport: a Guard per host with a
// breaker, the same timeout per attempt, and up to 3 attempts on the
// default retry budget.
func sluiceClient(cfg stormConfig) (stormClient, error) {
	tr := stormTransport()
	rt, err := sluicehttp.Transport(tr, func(host string) (*sluice.Guard, error) {
		b, err := breaker.New(host, breaker.WithConsecutiveFailures(5), breaker.WithBackoff(250*time.Millisecond, time.Second))
		if err != nil {
			return nil, err
		}
		opts := []sluice.Option{sluice.With(b), sluice.WithTimeout(cfg.Attempt), sluice.WithRetry(sluice.Retry{Attempts: 3})}
		if cfg.Guard != nil {
			opts = append(opts, cfg.Guard("storm/"+host)...)
		}
		return sluice.New(opts...)
	})
	if err != nil {
		return stormClient{}, err
	}
	c := &http.Client{Transport: rt}
	call := func(ctx context.Context, url string) error { return fetch(ctx, c, url) }
	return stormClient{name: "sluice", call: call, close: func() { _ = rt.Close(); tr.CloseIdleConnections() }}, nil
}

// stormResult is one group of callers' play of the storm.
type stormResult struct {
	name     string
	calls    [3]int // by the phase they were made in
	ok       [3]int // of which succeeded
	attempts [3]int // calls the dependency saw, by the phase they arrived in
	p50, p99 [3]time.Duration
	queueMax [3]int64
	// recovery is the time from the heal until the dependency answers
	// within twice its calm p99 again, and from then on (depRecovery); -1
	// if it never did.
	recovery time.Duration
}

// amplification is the calls the dependency saw for each call made, from
// the moment it turned slow to the end of the play.
func (r *stormResult) amplification() float64 {
	calls := r.calls[1] + r.calls[2]
	if calls == 0 {
		return 0
	}
	return float64(r.attempts[1]+r.attempts[2]) / float64(calls)
}

// playStorm plays the storm for sluice's callers, then for the naive ones,
// each against a dependency of its own: one after the other, so that the
// naive callers' storm does not take the machine from sluice's.
func playStorm(ctx context.Context, cfg stormConfig) (naive, guarded *stormResult, err error) {
	sc, err := sluiceClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	if guarded, err = playStormOnce(ctx, cfg, sc); err != nil {
		return nil, nil, err
	}
	if naive, err = playStormOnce(ctx, cfg, naiveClient(cfg)); err != nil {
		return nil, nil, err
	}
	return naive, guarded, nil
}

// playStormOnce plays the storm for the callers c against a fresh
// dependency.
func playStormOnce(ctx context.Context, cfg stormConfig, c stormClient) (*stormResult, error) {
	defer c.close()
	d, err := startStormDependency(cfg)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	d.start = start
	slowTimer := time.AfterFunc(cfg.Calm, func() { d.slow.Store(true) })
	healTimer := time.AfterFunc(cfg.Calm+cfg.Slow, func() { d.slow.Store(false) })
	r := stormLoad(ctx, cfg, c, d, start)
	slowTimer.Stop()
	healTimer.Stop()
	d.close()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	r.summarize(cfg, d)
	return r, nil
}

// stormLoad offers cfg.Rate calls a second through c for the whole play,
// each with cfg.Deadline, and counts how they ended.
func stormLoad(ctx context.Context, cfg stormConfig, c stormClient, d *stormDependency, start time.Time) *stormResult {
	r := &stormResult{name: c.name}
	url := "http://" + d.addr + "/"
	n := int(float64(cfg.Rate) * cfg.total().Seconds())
	interval := time.Second / time.Duration(cfg.Rate)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		if !pause(ctx, time.Until(start.Add(time.Duration(i)*interval))) {
			break
		}
		wg.Go(func() {
			p := cfg.phaseOf(time.Since(start))
			cctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
			err := c.call(cctx, url)
			cancel()
			mu.Lock()
			r.calls[p]++
			if err == nil {
				r.ok[p]++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return r
}

// summarize reads what the dependency saw.
func (r *stormResult) summarize(cfg stormConfig, d *stormDependency) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, at := range d.arrivals {
		r.attempts[cfg.phaseOf(at)]++
	}
	r.queueMax = d.queueMax
	var lats [3][]time.Duration
	for _, s := range d.served {
		p := cfg.phaseOf(s.at)
		lats[p] = append(lats[p], s.latency)
	}
	for p := range lats {
		sort.Slice(lats[p], func(i, j int) bool { return lats[p][i] < lats[p][j] })
		r.p50[p], r.p99[p] = percentile(lats[p], 0.5), percentile(lats[p], 0.99)
	}
	r.recovery = depRecovery(d.served, cfg.Calm+cfg.Slow, 2*r.p99[0]+5*time.Millisecond)
}

// depRecovery is the time from healAt to the end of the first tenth of a
// second from which on the calls the dependency saw arrive in each tenth were answered
// within bound at the median (a tenth that saw none counts for nothing); -1
// if that never happened. The median, so that a burst of a loaded machine
// does not hide a drained queue.
func depRecovery(s []served, healAt, bound time.Duration) time.Duration {
	const tenth = 100 * time.Millisecond
	buckets := map[time.Duration][]time.Duration{}
	var last time.Duration
	for _, x := range s {
		if x.at >= healAt {
			b := (x.at - healAt) / tenth
			buckets[b] = append(buckets[b], x.latency)
			last = max(last, b)
		}
	}
	first := time.Duration(-1)
	for b := time.Duration(0); b <= last; b++ {
		lats := buckets[b]
		if len(lats) == 0 {
			continue
		}
		sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
		if percentile(lats, 0.5) > bound {
			first = -1
			continue
		}
		if first < 0 {
			first = (b + 1) * tenth
		}
	}
	return first
}

// playStormPhase plays the default storm and prints its table; guard, as
// Config.guard, puts sluice's callers' Guards on the dashboard.
func playStormPhase(ctx context.Context, guard func(name string) []sluice.Option) error {
	cfg := defaultStorm()
	cfg.Guard = guard
	fmt.Printf("\nplaying a retry storm twice, %v each: callers retrying on sluice's budget, then naive ones\n", cfg.total())
	naive, guarded, err := playStorm(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(stormTable(cfg, naive, guarded))
	return nil
}

// stormTable renders the two plays side by side, phase by phase.
func stormTable(cfg stormConfig, runs ...*stormResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "retry storm: %d calls/s from each group of callers for %v (calm %v, dependency slow %v, healed %v)\n",
		cfg.Rate, cfg.total(), cfg.Calm, cfg.Slow, cfg.After)
	fmt.Fprintf(&b, "dependency: %d calls at a time, %v each (%v when slow), the rest queued; each attempt waits %v, each call %v, 3 attempts at most\n\n",
		cfg.Workers, cfg.Service, cfg.SlowService, cfg.Attempt, cfg.Deadline)
	fmt.Fprintf(&b, "%-16s %-8s %7s %9s %14s %7s %9s %9s %10s\n",
		"phase", "callers", "calls", "attempts", "amplification", "ok %", "dep p50", "dep p99", "dep queue")
	for p := range 3 {
		for _, r := range runs {
			amp, ok := 0.0, 0.0
			if r.calls[p] > 0 {
				amp = float64(r.attempts[p]) / float64(r.calls[p])
				ok = 100 * float64(r.ok[p]) / float64(r.calls[p])
			}
			fmt.Fprintf(&b, "%-16s %-8s %7d %9d %13.2f× %7.1f %9s %9s %10d\n",
				stormPhases[p], r.name, r.calls[p], r.attempts[p], amp, ok, fmtDur(r.p50[p]), fmtDur(r.p99[p]), r.queueMax[p])
		}
	}
	b.WriteString("\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "%-8s amplification %.2f× from the slowdown on; dependency back to its calm latency: %s\n",
			r.name, r.amplification(), fmtStormRecovery(r.recovery))
	}
	return b.String()
}

func fmtStormRecovery(d time.Duration) string {
	if d < 0 {
		return "never (within the run)"
	}
	return "within " + fmtDur(d) + " of the heal"
}
