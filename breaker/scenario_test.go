package breaker_test

import (
	"container/heap"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/timeouterr"
)

// scenario is a dependency's life replayed on a manual clock through a
// Guard: open-loop Poisson arrivals on a few routes share a pool of
// connections to one dependency, waiting in line for a free one; each call
// gives up at its deadline, a failure as the Guard's own timeout is; the
// dependency answers in healthy with a share of random failures, turns sick
// (a long latency, more failures) for a while, then heals. Unless noStall,
// the calls it is answering when it turns sick stall with it.
type scenario struct {
	seed          uint64
	routes        int
	rate          float64 // arrivals per second on each route
	conns         int
	deadline      time.Duration
	healthy       time.Duration // the dependency's latency when healthy...
	noise         float64       // ...and its share of failures
	sickAt        time.Duration
	sickFor       time.Duration // 0: never sick
	sickLat       time.Duration
	sickFail      float64
	calls         int  // arrivals to play, over all routes
	noStall       bool // calls in flight when it turns sick answer as if healthy
	noiseTimesOut bool // the healthy dependency's failures never answer: they time out
	spread        bool // the healthy latency varies: half of it fixed, half drawn from an exponential
}

// outcome is what a scenario's run saw.
type outcome struct {
	opens        int           // closed → open changes, over all breakers
	openedAt     time.Duration // when the last route's breaker first opened after sickAt; -1 if one never did
	admittedSick int           // calls admitted after sickAt, before their route's breaker opened
	reachedSick  int           // calls that reached the sick dependency, probes included
	closedAt     time.Duration // when every breaker was closed again after healing; -1 if never
}

type simCall struct {
	route    int
	call     sluice.Call
	running  bool // it holds a connection
	stalled  bool // the dependency turned sick while answering it
	finished bool
}

type simEvent struct {
	at   time.Duration
	seq  uint64
	kind uint8 // arrival, answer, deadline
	call *simCall
	fail bool
}

const (
	evArrival = iota
	evAnswer
	evDeadline
)

type eventQueue []simEvent

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

var (
	errDependency = errors.New("dependency failed")
	errDeadline   = &timeouterr.Error{After: 100 * time.Millisecond, Err: context.DeadlineExceeded}
)

// run plays s against the breakers of the policy newPolicy makes, whose
// second result reports the state of a route's breaker, and returns what
// happened.
func (s scenario) run(t testing.TB, newPolicy policyMaker) outcome {
	t.Helper()
	clk := sluice.NewManualClock(0)
	policy, stateOf := newPolicy(t, clk)
	g, err := sluice.New(sluice.With(policy), sluice.WithClock(clk))
	require.NoError(t, err)
	defer g.Close()

	rng := rand.New(rand.NewPCG(s.seed, 0x5eed))
	routeCtx := make([]context.Context, s.routes)
	for i := range routeCtx {
		routeCtx[i] = sluice.WithResource(context.Background(), "route-"+string(rune('a'+i)))
	}
	var q eventQueue
	var seq uint64
	push := func(e simEvent) { seq++; e.seq = seq; heap.Push(&q, e) }
	next := func(route int, after time.Duration) {
		push(simEvent{at: after + time.Duration(rng.ExpFloat64()/s.rate*float64(time.Second)), kind: evArrival, call: &simCall{route: route}})
	}
	for r := range s.routes {
		next(r, 0)
	}
	healAt := s.sickAt + s.sickFor
	sick := func(at time.Duration) bool { return s.sickFor > 0 && at >= s.sickAt && at < healAt }
	free := s.conns
	var waiting []*simCall
	var running []*simCall // calls holding a connection, to stall when the dependency turns sick
	stalled := false

	out := outcome{openedAt: -1, closedAt: -1}
	opened := make([]time.Duration, s.routes)
	for i := range opened {
		opened[i] = -1
	}
	prev := make([]breaker.State, s.routes)
	start := func(c *simCall, at time.Duration) {
		free--
		c.running = true
		if sick(at) {
			out.reachedSick++
			fail := rng.Float64() < s.sickFail
			push(simEvent{at: at + s.sickLat, kind: evAnswer, call: c, fail: fail})
			return
		}
		running = append(running, c)
		fail := rng.Float64() < s.noise
		if fail && s.noiseTimesOut {
			return // its deadline ends it
		}
		lat := s.healthy
		if s.spread {
			lat = s.healthy/2 + time.Duration(rng.ExpFloat64()*float64(s.healthy/2))
		}
		push(simEvent{at: at + lat, kind: evAnswer, call: c, fail: fail})
	}
	release := func(at time.Duration) {
		free++
		for len(waiting) > 0 && free > 0 {
			c := waiting[0]
			waiting = waiting[1:]
			if !c.finished {
				start(c, at)
			}
		}
	}
	finish := func(c *simCall, err error, at time.Duration) {
		c.finished = true
		c.call.End(err)
		if c.running {
			release(at)
		}
	}
	arrivals := 0
	for q.Len() > 0 {
		e := heap.Pop(&q).(simEvent)
		if !stalled && !s.noStall && s.sickFor > 0 && e.at >= s.sickAt {
			// The dependency turns sick: the calls it is answering stall.
			stalled = true
			for _, c := range running {
				c.stalled = true
			}
		}
		clk.Set(e.at)
		c := e.call
		switch e.kind {
		case evArrival:
			arrivals++
			if arrivals < s.calls {
				next(c.route, e.at)
			}
			var call sluice.Call
			err := g.Begin(routeCtx[c.route], &call)
			if err != nil {
				break // rejected: the caller's fallback answers
			}
			c.call = call
			if sick(e.at) && opened[c.route] < 0 {
				out.admittedSick++
			}
			push(simEvent{at: e.at + s.deadline, kind: evDeadline, call: c})
			if free > 0 {
				start(c, e.at)
			} else {
				waiting = append(waiting, c)
			}
		case evAnswer:
			if c.finished || c.stalled {
				break // timed out already, or stalled: its deadline ends it
			}
			err := error(nil)
			if e.fail {
				err = errDependency
			}
			finish(c, err, e.at)
		case evDeadline:
			if !c.finished {
				finish(c, errDeadline, e.at)
			}
		}
		if len(running) > 64 {
			n := 0
			for _, r := range running {
				if !r.finished {
					running[n] = r
					n++
				}
			}
			running = running[:n]
		}
		allClosed := true
		for r := range s.routes {
			st := stateOf(r)
			if st == breaker.StateOpen && prev[r] == breaker.StateClosed {
				out.opens++
				if s.sickFor > 0 && e.at >= s.sickAt && opened[r] < 0 {
					opened[r] = e.at
				}
			}
			prev[r] = st
			allClosed = allClosed && st == breaker.StateClosed
		}
		if s.sickFor > 0 && e.at >= healAt && allClosed && out.closedAt < 0 {
			out.closedAt = e.at - healAt
		}
	}
	for _, at := range opened {
		if at < 0 {
			out.openedAt = -1
			break
		}
		out.openedAt = max(out.openedAt, at-s.sickAt)
	}
	return out
}

// slowDependency is the slow-dependency scenario: 150 calls/s on each of two
// routes sharing 16 connections, a 100 ms deadline; the dependency answers
// in 20 ms, then in 2 s with 25 % failures for 5 s.
func slowDependency(seed uint64) scenario {
	return scenario{
		seed: seed, routes: 2, rate: 150, conns: 16, deadline: 100 * time.Millisecond,
		healthy: 20 * time.Millisecond, noise: 0.01,
		sickAt: 3 * time.Second, sickFor: 5 * time.Second, sickLat: 2 * time.Second, sickFail: 0.25,
		calls: 300 * 11, // until 3 s after the healing
	}
}

// noisyDependency is a healthy dependency failing 1 % of calls at random.
func noisyDependency(seed uint64, calls int) scenario {
	return scenario{
		seed: seed, routes: 2, rate: 150, conns: 16, deadline: 100 * time.Millisecond,
		healthy: 20 * time.Millisecond, noise: 0.01, calls: calls,
	}
}

// policyMaker makes the policy a scenario runs against, on clock clk, and a
// function reporting the state of route r's breaker.
type policyMaker func(t testing.TB, clk sluice.Clock) (p sluice.Policy, stateOf func(r int) breaker.State)

// groupOf makes a Group of breakers keyed by route.
func groupOf(opts ...breaker.Option) policyMaker {
	return func(t testing.TB, clk sluice.Clock) (sluice.Policy, func(int) breaker.State) {
		g, err := breaker.NewGroup("routes", append([]breaker.Option{breaker.WithClock(clk)}, opts...)...)
		require.NoError(t, err)
		return g, func(r int) breaker.State {
			b, ok := g.Get("route-" + string(rune('a'+r)))
			if !ok {
				return breaker.StateClosed
			}
			return b.State()
		}
	}
}

// singleOf makes one breaker for every route.
func singleOf(opts ...breaker.Option) policyMaker {
	return func(t testing.TB, clk sluice.Clock) (sluice.Policy, func(int) breaker.State) {
		b, err := breaker.New("dep", append([]breaker.Option{breaker.WithClock(clk)}, opts...)...)
		require.NoError(t, err)
		return b, func(int) breaker.State { return b.State() }
	}
}

// TestDefaultsOpenFastOnSlowDependency pins the defaults of New and
// NewGroup: on the slow-dependency scenario they open within 150 ms of the
// dependency turning sick, after about 40 calls sent into it, and close
// within 2 s of its healing; on a healthy dependency failing 1 % of calls at
// random, they never open.
func TestDefaultsOpenFastOnSlowDependency(t *testing.T) {
	const seeds = 20
	shapes := []struct {
		name string
		make policyMaker
		// The slowest run may open this late: one breaker sees both routes'
		// calls, a Group's breaker only its route's, half as many.
		worstOpen time.Duration
	}{
		{"one breaker", singleOf(), 150 * time.Millisecond},
		{"group by route", groupOf(), 200 * time.Millisecond},
	}
	for _, sh := range shapes {
		for _, stall := range []bool{true, false} {
			name := sh.name + "/in-flight calls stall"
			if !stall {
				name = sh.name + "/in-flight calls answer"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var opens, closes []time.Duration
				calls, reached := 0, 0
				for seed := uint64(1); seed <= seeds; seed++ {
					sc := slowDependency(seed)
					sc.noStall = !stall
					o := sc.run(t, sh.make)
					require.GreaterOrEqual(t, o.openedAt, time.Duration(0), "seed %d: never opened", seed)
					assert.LessOrEqual(t, o.openedAt, sh.worstOpen, "seed %d: opened late", seed)
					// Calls admitted during the deadline cannot be helped:
					// 30 on average, give or take 5 from the arrivals alone.
					assert.LessOrEqual(t, o.admittedSick, 55, "seed %d", seed)
					assert.GreaterOrEqual(t, o.closedAt, time.Duration(0), "seed %d: never closed again", seed)
					assert.LessOrEqual(t, o.closedAt, 2*time.Second, "seed %d: slow to recover", seed)
					opens = append(opens, o.openedAt)
					closes = append(closes, o.closedAt)
					calls += o.admittedSick
					reached += o.reachedSick
				}
				slices.Sort(opens)
				slices.Sort(closes)
				mean := float64(calls) / seeds
				t.Logf("opened after %v (median), %v (slowest); %.1f calls into the sick dependency before, %.1f in its 5 s, probes included; closed %v after the healing (median), %v (slowest)",
					opens[seeds/2].Round(time.Millisecond), opens[seeds-1].Round(time.Millisecond), mean, float64(reached)/seeds,
					closes[seeds/2].Round(time.Millisecond), closes[seeds-1].Round(time.Millisecond))
				assert.LessOrEqual(t, opens[seeds/2], 150*time.Millisecond, "median time to open")
				if stall || sh.name == "one breaker" {
					assert.LessOrEqual(t, mean, 40.0, "calls into the sick dependency before it opened")
				}
			})
		}
	}
	for _, sh := range shapes {
		t.Run(sh.name+"/1% noise", func(t *testing.T) {
			t.Parallel()
			for seed := uint64(1); seed <= 4; seed++ {
				sc := noisyDependency(seed, 100_000)
				sc.noiseTimesOut = seed%2 == 0
				sc.spread = seed > 2
				assert.Zero(t, sc.run(t, sh.make).opens, "seed %d", seed)
			}
		})
	}
}

// TestDefaultsRideOutASlowerDependency: at the defaults, a dependency that
// turns merely slower for 5 s (20 ms to 40 ms: inside the 100 ms deadline,
// the 16 connections 75 % busy) while still failing 1 % of calls at random
// never opens a breaker, neither one for every route nor a Group's per
// route. At 60 ms the pool cannot keep up (300/s × 60 ms > 16), calls queue
// past their deadline and opening is right.
func TestDefaultsRideOutASlowerDependency(t *testing.T) {
	shapes := []struct {
		name string
		make policyMaker
	}{
		{"one breaker", singleOf()},
		{"group by route", groupOf()},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			for seed := uint64(1); seed <= 10; seed++ {
				sc := slowDependency(seed)
				sc.sickLat, sc.sickFail = 40*time.Millisecond, 0.01
				sc.noStall = true // the calls in flight answer too, just later
				o := sc.run(t, sh.make)
				assert.Zero(t, o.opens, "seed %d: opened on a slower, healthy dependency", seed)
				assert.Equal(t, time.Duration(-1), o.openedAt, "seed %d", seed)
			}
		})
	}
}
