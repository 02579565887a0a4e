package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
)

// machine is a plain reference of the whole state machine as the doc
// comments describe it: the closed state's trip decision (model), the open
// duration with its backoff and jitter, the half-open probes, the forced
// states, OpenFor, and the generations that drop late outcomes.
type machine struct {
	proto             model // the closed state's configuration
	m                 *model
	state             breaker.State
	forced            bool
	openUntil         time.Duration
	trips             int
	probes, need      int64
	taken, succ, fail int64
	lastProbe         time.Duration // when the last probe was admitted
	hungWait          time.Duration // the wait the last hung probe ran out; 0 once closed
	phase             int
	base, most        time.Duration
	jitter, draw      float64
	changes           []string
	// The stall check of the consecutive-failure strategy: the usual
	// latency of a success and the instant it was last sampled (kept across
	// phases), the ticks (2^20 ns) that saw an admission since a success
	// last ended, the instant of the first call of the third of them and
	// the last tick that saw one (the phase's); ticked tells whether the
	// last call admitted was the first of its tick.
	usual, sampledAt time.Duration
	sinceOK          int64
	armed            bool // a success ended in this closed phase
	thirdSince       time.Duration
	lastTick         int64
	hasTick          bool
	ticked           bool
	stalls           int // trips of the stall check
}

func (x *machine) setPhase(to breaker.State, now, openFor time.Duration, forced bool) {
	x.phase++
	if x.state != to {
		x.changes = append(x.changes, x.state.String()+">"+to.String())
	}
	x.state, x.forced = to, forced
	x.taken, x.succ, x.fail = 0, 0, 0
	x.sinceOK, x.armed, x.hasTick = 0, false, false
	switch to {
	case breaker.StateClosed:
		fresh := x.proto
		x.m = &fresh
	case breaker.StateOpen:
		x.openUntil = now + openFor
		if x.openUntil < now {
			x.openUntil = math.MaxInt64
		}
	}
}

// openFor is the open duration after x.trips openings in a row: the base,
// doubled for each further one up to the maximum, less the jitter's share.
func (x *machine) openFor() time.Duration {
	d := x.base
	for i := 1; i < x.trips; i++ {
		if d > x.most/2 {
			d = x.most
			break
		}
		d *= 2
	}
	d = min(d, x.most)
	d -= time.Duration(float64(d) * x.jitter * x.draw)
	return max(d, 1)
}

// admit returns whether a call at now is admitted, as a probe or not, and
// the RetryAfter of a rejection.
func (x *machine) admit(now time.Duration) (ok, probe bool, retry time.Duration) {
	if x.state == breaker.StateOpen {
		switch {
		case x.forced:
			return false, false, x.base
		case now < x.openUntil:
			return false, false, x.openUntil - now
		}
		x.setPhase(breaker.StateHalfOpen, now, 0, false)
	}
	if x.state == breaker.StateHalfOpen {
		if x.taken >= x.probes {
			wait := max(x.base, 10*time.Second)
			switch {
			case x.usual > 0:
				wait = max(x.base, 2*x.usual, x.proto.slow)
			case x.proto.slow > 0:
				wait = max(x.base, x.proto.slow)
			}
			if x.hungWait > 0 {
				wait = max(wait, min(2*x.hungWait, max(10*time.Second, x.most, x.proto.slow)))
			}
			if now-x.lastProbe > wait && x.succ+x.fail < x.taken && !x.forced {
				// Probes that have not ended by then count as failed, and
				// the next wait longer.
				x.hungWait = wait
				x.fail = x.taken - x.succ
				x.trips++
				x.setPhase(breaker.StateOpen, now, x.openFor(), false)
				return x.admit(now)
			}
			return false, false, x.base
		}
		x.taken++
		x.lastProbe = now
		return true, true, 0
	}
	x.ticked = false
	if n := int64(x.proto.consecutive); n > 0 && (!x.hasTick || x.lastTick != int64(now)>>20) {
		last, had := x.lastTick, x.hasTick
		x.lastTick, x.hasTick, x.ticked = int64(now)>>20, true, true
		x.sinceOK++
		if x.sinceOK == 3 {
			x.thirdSince = now
		} else if x.sinceOK > 3 {
			if had && x.lastTick-last > int64(25*time.Millisecond)>>20 {
				x.thirdSince = now // no call came for a while: timed again
			} else if x.sinceOK > max(n, 3) && x.armed && x.usual > 0 && now-x.thirdSince > max(2*x.usual, 25*time.Millisecond) && !x.forced {
				x.trips++
				x.stalls++
				x.setPhase(breaker.StateOpen, now, x.openFor(), false)
				return x.admit(now)
			}
		}
	}
	return true, false, 0
}

// stallEnd notes how a call of the closed phase ended, for the stall check;
// ticked tells whether it was the first of its tick.
func (x *machine) stallEnd(o sluice.Outcome, ticked bool, now, latency time.Duration) {
	switch o {
	case sluice.Failure:
		return
	case sluice.Ignored, sluice.Released:
		if ticked && x.sinceOK > 0 {
			x.sinceOK--
		}
		return
	}
	x.sinceOK, x.armed = 0, true
	if latency < 0 || now-x.sampledAt < ms {
		return
	}
	x.sampledAt = now
	switch {
	case x.usual == 0:
		x.usual = latency
	case latency > x.usual:
		x.usual += (latency - x.usual) / 4
	default:
		x.usual -= (x.usual - latency) / 64
	}
	x.usual = max(x.usual, 1)
}

func (x *machine) done(phase int, probe, ticked bool, o sluice.Outcome, now, latency time.Duration) {
	if phase != x.phase {
		return // admitted before the last state change
	}
	switch {
	case x.state == breaker.StateClosed:
		if x.proto.consecutive > 0 {
			x.stallEnd(o, ticked, now, latency)
		}
		if x.m.record(now, o, latency) && !x.forced {
			x.trips++
			x.setPhase(breaker.StateOpen, now, x.openFor(), false)
		}
	case x.state == breaker.StateHalfOpen && probe:
		switch {
		case o == sluice.Released || o == sluice.Ignored:
			x.taken--
			return
		case o == sluice.Success && (x.proto.slow == 0 || latency <= x.proto.slow):
			x.succ++
		default:
			x.fail++
		}
		switch {
		case x.succ >= x.need:
			x.trips, x.hungWait = 0, 0
			x.setPhase(breaker.StateClosed, now, 0, false)
		case x.fail > x.probes-x.need:
			x.trips++
			x.setPhase(breaker.StateOpen, now, x.openFor(), false)
		}
	}
}

// TestPropertyBreakerMatchesStateMachine drives a Breaker and the reference
// machine through random calls, outcomes, latencies, time steps (backwards
// too on a count window), ForceOpen, ForceClose, Reset and OpenFor, and
// compares after every step the decisions, the state, the counts and the
// state changes the listeners heard. A third of the runs go in sub-tick
// steps with few successes, so that the stall check trips.
func TestPropertyBreakerMatchesStateMachine(t *testing.T) {
	budget := 500 * time.Millisecond
	if testing.Short() {
		budget = 200 * time.Millisecond
	}
	start := time.Now()
	runs, changes, stalls := 0, 0, 0
	ctx := context.Background()
	for seed := uint64(1); seed <= 50 || time.Since(start) < budget; seed++ { // 50 seeds on any machine
		runs++
		stally := seed%3 == 0
		r := rand.New(rand.NewPCG(seed, 0xb4ea))
		m, opts := randomModel(r)
		if stally { // consecutive failures on a count window: the default's strategy
			m = &model{count: 1 + r.IntN(100), consecutive: 3 + r.IntN(4)}
			opts = []breaker.Option{breaker.WithCountWindow(m.count), breaker.WithConsecutiveFailures(m.consecutive)}
		}
		x := &machine{proto: *m, m: m, probes: 1, need: 1, draw: 0.5}
		x.base = time.Duration(1+r.IntN(50)) * ms
		x.most = x.base
		if r.IntN(2) == 0 {
			x.most = x.base << r.IntN(5)
			opts = append(opts, breaker.WithBackoff(x.base, x.most))
		} else {
			opts = append(opts, breaker.WithOpenDuration(x.base))
		}
		if r.IntN(2) == 0 {
			x.probes = int64(1 + r.IntN(5))
			ratio := float64(1+r.IntN(10)) / 10
			x.need = max(int64(math.Ceil(ratio*float64(x.probes)-1e-9)), 1)
			opts = append(opts, breaker.WithHalfOpenProbes(int(x.probes), ratio))
		}
		if r.IntN(3) == 0 {
			x.jitter = float64(r.IntN(9)) / 10
			opts = append(opts, breaker.WithJitter(x.jitter), breaker.WithRandom(func() float64 { return 0.5 }))
		}
		clock := sluice.NewManualClock(time.Duration(r.IntN(1000)) * ms)
		b := mustNew(t, append(opts, breaker.WithClock(clock))...)
		var heard []string
		b.Subscribe(func(c sluice.StateChange) { heard = append(heard, c.From+">"+c.To) })
		type held struct {
			tk            sluice.Ticket
			phase         int
			probe, ticked bool
			at            time.Duration
		}
		var out []held
		var trace []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d (%+v, probes %d need %d, open %v..%v, jitter %v): %s\nlast operations:\n  %s", seed, x.proto,
				x.probes, x.need, x.base, x.most, x.jitter, fmt.Sprintf(format, args...), strings.Join(trace[max(len(trace)-30, 0):], "\n  "))
		}
		now := clock.Now()
		for range 300 {
			op := r.IntN(40)
			if stally {
				op = r.IntN(34) // no forcing, no OpenFor
			}
			switch {
			case op < 8:
				d := time.Duration(r.Int64N(int64(x.most) + 1))
				if r.IntN(3) == 0 {
					d = time.Duration(r.IntN(3)) * ms
				}
				if stally && r.IntN(20) != 0 {
					d = time.Duration(r.IntN(8)) * ms / 2
				}
				if x.proto.count > 0 && r.IntN(15) == 0 {
					d = -d
				}
				now += d
				clock.Set(now)
				trace = append(trace, fmt.Sprintf("time %v", now))
			case op < 22:
				d, tk := admit(b, ctx, now)
				ok, probe, retry := x.admit(now)
				trace = append(trace, fmt.Sprintf("admit at %v: %v retry %v (want %v, %v)", now, d.Allowed, d.RetryAfter, ok, retry))
				if d.Allowed != ok || d.RetryAfter != retry || d.Limit != -1 {
					fail("Admit at %v: %+v, want allowed %v, RetryAfter %v", now, d, ok, retry)
				}
				if !ok && !errors.Is(d.Cause, sluice.ErrCircuitOpen) {
					fail("rejection's cause %v", d.Cause)
				}
				if ok {
					out = append(out, held{tk, x.phase, probe, x.ticked, now})
				}
			case op < 34:
				if len(out) == 0 {
					continue
				}
				k := r.IntN(len(out))
				h := out[k]
				out = append(out[:k], out[k+1:]...)
				o := []sluice.Outcome{S, S, F, F, I, R}[r.IntN(6)]
				lat := max(now-h.at, 0)
				if r.IntN(2) == 0 {
					lat = time.Duration(r.IntN(20)) * ms
				}
				if stally {
					o = R
					if k := r.IntN(20); k < 3 {
						o = []sluice.Outcome{S, F, I}[k]
					}
					lat = time.Duration(r.IntN(4)) * ms / 4
				}
				trace = append(trace, fmt.Sprintf("done %v latency %v at %v (probe %v)", o, lat, now, h.probe))
				b.Done(h.tk, o, now, lat)
				x.done(h.phase, h.probe, h.ticked, o, now, lat)
			case op < 35:
				trace = append(trace, "force open")
				b.ForceOpen()
				x.setPhase(breaker.StateOpen, now, 0, true)
			case op < 36:
				trace = append(trace, "force close")
				b.ForceClose()
				x.setPhase(breaker.StateClosed, now, 0, true)
			case op < 37:
				trace = append(trace, "reset")
				b.Reset()
				x.trips, x.hungWait = 0, 0
				x.setPhase(breaker.StateClosed, now, 0, false)
			default:
				d := time.Duration(r.IntN(100)-10) * ms
				trace = append(trace, fmt.Sprintf("open for %v at %v", d, now))
				b.OpenFor(ctx, now, d)
				if d > 0 && !x.forced && (x.state != breaker.StateOpen || x.openUntil-now < d) {
					x.setPhase(breaker.StateOpen, now, d, false)
				}
			}
			if s := b.State(); s != x.state {
				fail("state %v, want %v", s, x.state)
			}
			if strings.Join(heard, " ") != strings.Join(x.changes, " ") {
				fail("listeners heard %v, want %v", heard, x.changes)
			}
			c := b.Counts()
			wantProbe := time.Duration(0)
			if x.state == breaker.StateOpen && !x.forced {
				wantProbe = max(x.openUntil-now, 0)
			}
			if c.NextProbe != wantProbe {
				fail("next probe in %v, want %v", c.NextProbe, wantProbe)
			}
			if x.state == breaker.StateHalfOpen {
				if c.ProbesAdmitted != x.taken || c.ProbeSuccesses != x.succ || c.ProbeFailures != x.fail {
					fail("counts %+v, want %d probes in flight, %d succeeded, %d failed", c, x.taken, x.succ, x.fail)
				}
			} else if c.ProbesAdmitted != 0 || c.ProbeSuccesses != 0 || c.ProbeFailures != 0 {
				fail("probe counts %+v in state %v", c, x.state)
			}
			if x.proto.count > 0 {
				calls := x.m.calls[max(0, len(x.m.calls)-x.proto.count):]
				var fails, slows int64
				for _, k := range calls {
					if k.fail {
						fails++
					}
					if k.slow {
						slows++
					}
				}
				want := breaker.Counts{Requests: int64(len(calls)), Failures: fails, Successes: int64(len(calls)) - fails,
					SlowCalls: slows, ConsecutiveFailures: int64(x.m.run),
					ProbesAdmitted: c.ProbesAdmitted, ProbeSuccesses: c.ProbeSuccesses, ProbeFailures: c.ProbeFailures, NextProbe: c.NextProbe, Forced: x.forced}
				if c != want {
					fail("counts %+v, want %+v", c, want)
				}
			}
		}
		changes += len(x.changes)
		stalls += x.stalls
	}
	t.Logf("%d runs, %d state changes, %d by the stall check", runs, changes, stalls)
	if stalls <= runs/30 {
		t.Fatalf("the stall check tripped %d times in %d runs: the runs do not reach it", stalls, runs)
	}
}

// TestPropertyBreakerConcurrent runs callers and a steering goroutine
// against one Breaker, checking while they run that the probes in flight
// never exceed the configured number, that the state changes heard chain
// and are transitions the doc comments allow, and that the outcomes of the
// half-open state never exceed the probes.
func TestPropertyBreakerConcurrent(t *testing.T) {
	const probes = 3
	b := mustNew(t, breaker.WithCountWindow(20), breaker.WithErrorRatio(0.5, 5),
		breaker.WithOpenDuration(ms), breaker.WithHalfOpenProbes(probes, 0.6))
	log := hear(b)
	var clock atomic.Int64
	var bad atomic.Value
	var callers, steering sync.WaitGroup
	stop := make(chan struct{})
	for w := range 8 {
		callers.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for range 3000 {
				now := time.Duration(clock.Add(int64(20 * time.Microsecond)))
				d, tk := admit(b, context.Background(), now)
				if !d.Allowed {
					if d.RetryAfter <= 0 || !errors.Is(d.Cause, sluice.ErrCircuitOpen) {
						bad.Store(fmt.Sprintf("rejection %+v", d))
					}
					continue
				}
				c := b.Counts()
				if c.ProbesAdmitted > probes || c.ProbeSuccesses+c.ProbeFailures > probes {
					bad.Store(fmt.Sprintf("counts %+v", c))
				}
				b.Done(tk, []sluice.Outcome{S, S, F, F, I, R}[r.IntN(6)], now, 0)
			}
		})
	}
	steering.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 50 {
			case 0:
				b.ForceOpen()
			case 1:
				b.Reset()
			case 2:
				b.OpenFor(context.Background(), time.Duration(clock.Load()), ms)
			}
			time.Sleep(50 * time.Microsecond)
		}
	})
	callers.Wait()
	close(stop)
	steering.Wait()
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	heard := log.all()
	allowed := map[string]bool{
		"closed>open": true, "open>half-open": true, "half-open>closed": true, "half-open>open": true,
		"open>closed": true, // ForceClose, Reset
	}
	for i, c := range heard {
		if !allowed[c.From+">"+c.To] {
			t.Errorf("change %d: %s to %s", i, c.From, c.To)
		}
		if i > 0 && heard[i-1].To != c.From {
			t.Fatalf("change %d from %s after a change to %s", i, c.From, heard[i-1].To)
		}
	}
	if len(heard) == 0 {
		t.Fatal("no state change")
	}
	t.Logf("%d state changes", len(heard))
}

// TestPropertyGroupKeepsOpenBreakers drives a small Group with more keys
// than it may hold, failing calls that open breakers, ForceOpen and time
// steps, and checks after every step that it holds no more than its cap and
// still holds every breaker it ever handed out that is not closed (or is
// held closed by ForceClose), but for open ones gone idle.
func TestPropertyGroupKeepsOpenBreakers(t *testing.T) {
	budget := 500 * time.Millisecond
	if testing.Short() {
		budget = 100 * time.Millisecond
	}
	start := time.Now()
	for seed := uint64(1); seed <= 50 || time.Since(start) < budget; seed++ { // 50 seeds on any machine
		r := rand.New(rand.NewPCG(seed, 0x9e0))
		most := 1 + r.IntN(5)
		keys := most + r.IntN(6)
		od := time.Duration(1+r.IntN(20)) * ms
		g := mustGroup(t, breaker.WithMaxBreakers(most), breaker.WithConsecutiveFailures(2),
			breaker.WithOpenDuration(od), breaker.WithHalfOpenProbes(2, 1))
		seen := map[*breaker.Breaker]string{}
		lastCall := map[string]time.Duration{}
		forced := map[*breaker.Breaker]bool{} // held open by ForceOpen
		type held struct {
			tk sluice.Ticket
			at time.Duration
		}
		var out []held
		now := time.Duration(0)
		for step := range 400 {
			key := fmt.Sprint("k", r.IntN(keys))
			ctx := sluice.WithResource(context.Background(), key)
			switch op := r.IntN(10); {
			case op < 2:
				now += time.Duration(r.IntN(10)) * ms
			case op < 6:
				lastCall[key] = now
				d, tk := admit(g, ctx, now)
				if d.Allowed {
					out = append(out, held{tk, now})
				}
				if b, ok := g.Get(key); ok {
					seen[b] = key
				}
			case op < 9:
				if len(out) == 0 {
					continue
				}
				k := r.IntN(len(out))
				h := out[k]
				out = append(out[:k], out[k+1:]...)
				g.Done(h.tk, []sluice.Outcome{S, F, F, I, R}[r.IntN(5)], now, now-h.at)
			default:
				if b, ok := g.Get(key); ok {
					switch r.IntN(3) {
					case 0:
						b.ForceOpen()
					case 1:
						b.ForceClose()
					default:
						b.Reset()
					}
					forced[b] = b.State() == breaker.StateOpen
				}
			}
			if g.Len() > most {
				t.Fatalf("seed %d step %d: %d breakers, cap %d", seed, step, g.Len(), most)
			}
			for b, key := range seen {
				if s := b.State(); s == breaker.StateClosed {
					continue
				}
				if cur, ok := g.Get(key); ok && cur == b {
					continue
				}
				if b.State() == breaker.StateOpen && !forced[b] && now-lastCall[key] >= od {
					delete(seen, b) // an open breaker gone idle, dropped for a new key
					continue
				}
				t.Fatalf("seed %d step %d: the %v breaker of %s was dropped (now %v, last call %v, open %v)", seed, step, b.State(), key, now, lastCall[key], od)
			}
		}
	}
}

// TestPropertyGroupConcurrentKeepsOpenBreakers has callers fail on more keys
// than a Group holds, so that it evicts while breakers trip, and checks at
// the end that no breaker it handed out was dropped open.
func TestPropertyGroupConcurrentKeepsOpenBreakers(t *testing.T) {
	const most, keys = 4, 12
	g := mustGroup(t, breaker.WithMaxBreakers(most), breaker.WithConsecutiveFailures(3), breaker.WithOpenDuration(time.Hour))
	var mu sync.Mutex
	seen := map[*breaker.Breaker]string{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 11))
			for i := range 3000 {
				key := fmt.Sprint("k", r.IntN(keys))
				ctx := sluice.WithResource(context.Background(), key)
				now := time.Duration(i) * time.Microsecond
				d, tk := admit(g, ctx, now)
				if b, ok := g.Get(key); ok {
					mu.Lock()
					seen[b] = key
					mu.Unlock()
				}
				if d.Allowed {
					g.Done(tk, []sluice.Outcome{S, F, F}[r.IntN(3)], now, 0)
				}
			}
		})
	}
	wg.Wait()
	dropped := 0
	for b, key := range seen {
		if b.State() == breaker.StateClosed {
			continue
		}
		if cur, ok := g.Get(key); !ok || cur != b {
			dropped++
			t.Errorf("the %v breaker of %s was dropped", b.State(), key)
		}
	}
	if g.Len() > most {
		t.Errorf("%d breakers, cap %d", g.Len(), most)
	}
}
