package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// drive feeds g one window per 100 ms in which the limit is full, with the
// latency service gives at that concurrency, and returns the limits and
// whether each window probed.
func drive(g *gradient, windows int, service func(conc int64) time.Duration) (limits []int64, probes []bool) {
	limit := g.current()
	now := time.Duration(0)
	for range windows {
		now += 100 * time.Millisecond
		limit = g.update(service(limit), 0, limit, now, false, false)
		limits = append(limits, limit)
		probes = append(probes, g.probing())
	}
	return limits, probes
}

// cpu2x4 is a CPU-bound service of 2 cores and 4 ms a request: past 2 in
// flight, latency grows in proportion.
func cpu2x4(conc int64) time.Duration { return 4 * time.Millisecond * time.Duration(max(conc, 2)) / 2 }

// pool16x20 is a pool of 16 connections held 20 ms.
func pool16x20(conc int64) time.Duration {
	return 20 * time.Millisecond * time.Duration(max(conc, 16)) / 16
}

// Started far past the knee, the limit finds it: the first probe descends
// until latency stops falling in proportion, and the baseline it measures
// brings the limit down to where latency is within tolerance.
func TestGradientFindsTheKneeFromPastIt(t *testing.T) {
	for name, c := range map[string]struct {
		service func(int64) time.Duration
		floor   int
		lo, hi  int64
		base    time.Duration
	}{
		"cpu":  {cpu2x4, 1, 2, 3, 4 * time.Millisecond},
		"pool": {pool16x20, 1, 16, 20, 20 * time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			g := newGradient(c.floor)
			g.limit = 200
			limits, probes := drive(g, 40, c.service)
			assert.Contains(t, probes, true, "it probed")
			last := limits[len(limits)-10:]
			for _, l := range last {
				assert.GreaterOrEqual(t, l, c.lo, "limits %v", limits)
				assert.LessOrEqual(t, l, c.hi, "limits %v", limits)
			}
			assert.Equal(t, c.base, g.baseline())
		})
	}
}

// Once a probe has measured the baseline, a later probe that finds the
// latency at or under it does not descend: it is under the knee. The
// figures are a probe the overload program's pool of 16 logged: at 18 in
// flight the window's latency was 22.19 ms, the probe at 14 measured 20.47
// ms against a baseline of 21.36 ms, and falling that much in proportion
// halved the probe to 7, idling half the pool for a window.
func TestGradientLaterProbeUnderTheKneeDoesNotDescend(t *testing.T) {
	g := newGradient(2)
	g.limit, g.base, g.measured = 18, 21360*time.Microsecond, true
	g.windows, g.binds, g.nextProbe = gradFirstProbe, probeBinds, time.Second
	require.Equal(t, int64(14), g.update(22190*time.Microsecond, 0, 18, time.Second, false, false), "the probe")
	require.True(t, g.probing())
	limit := g.update(20470*time.Microsecond, 0, 14, time.Second+100*time.Millisecond, false, false)
	assert.False(t, g.probing(), "the probe ended at 14; limit %d", limit)
	assert.Equal(t, 20470*time.Microsecond, g.baseline())
	assert.Equal(t, int64(18), limit, "back near the knee, judged by the new baseline")
}

// Windows whose latency is within the tolerance of a baseline a probe has
// found where it was confirm it as a probe would: after the first probe
// and the one that checks it a second later, the limit of a pool at its
// knee probes once in 40 s, not at 5, 15 and 35 s, each probe idling a
// quarter of the pool for a window.
func TestGradientWindowsAtTheBaselinePutProbesOff(t *testing.T) {
	g := newGradient(2)
	limits, probes := drive(g, 600, pool16x20) // 60 s
	var began []time.Duration
	for i, p := range probes {
		if p && (i == 0 || !probes[i-1]) {
			began = append(began, time.Duration(i+1)*100*time.Millisecond)
		}
	}
	require.GreaterOrEqual(t, len(began), 3, "probes began at %v", began)
	assert.Less(t, began[1]-began[0], 2*time.Second, "the second checks the first: %v", began)
	for _, at := range began[2:] {
		assert.GreaterOrEqual(t, at-began[1], gradProbeMax, "probes began at %v", began)
	}
	for _, l := range limits[len(limits)-100:] {
		assert.GreaterOrEqual(t, l, int64(16), "the pool stays busy")
	}
}

// A first probe taken during a passing slowdown measures a baseline too
// high; the probe that checks it a second later finds it out.
func TestGradientSecondProbeChecksTheFirst(t *testing.T) {
	g := newGradient(2)
	g.limit = 60
	slow := true
	limit, now := g.current(), time.Duration(0)
	for range 40 { // 4 s
		now += 100 * time.Millisecond
		lat := pool16x20(limit)
		if slow {
			lat *= 2
		}
		limit = g.update(lat, 0, limit, now, false, false)
		if g.measured {
			slow = false // the slowdown passed with the first probe
		}
	}
	assert.Equal(t, 20*time.Millisecond, g.baseline())
	assert.LessOrEqual(t, limit, int64(20), "back near the knee 4 s in")
}

// A baseline measured too high (a probe taken during a passing slowdown)
// is found out at the next probe: the limit past the knee of a pool of 16
// comes back near it within that probe.
func TestGradientLaterProbeFindsAnInflatedBaseline(t *testing.T) {
	g := newGradient(2)
	g.limit, g.base, g.measured = 34, 40*time.Millisecond, true
	g.windows, g.binds, g.nextProbe = gradFirstProbe, probeBinds, 0
	limit, now := g.current(), time.Duration(0)
	for range 20 { // 2 s
		now += 100 * time.Millisecond
		limit = g.update(pool16x20(limit), 0, limit, now, false, false)
	}
	assert.LessOrEqual(t, limit, int64(20), "2 s after a probe from a limit of 34")
	assert.Equal(t, 20*time.Millisecond, g.baseline())
}

// Whatever the latency, the limit stays one over the processors or above:
// a server with that many processors needs that many requests to keep them
// busy, and one more while a request is off its processor. Its probes go
// down to the processors, where there is no queue to measure.
func TestGradientKeepsItsFloor(t *testing.T) {
	g := newGradient(4)
	limits, probes := drive(g, 60, func(conc int64) time.Duration { return time.Duration(conc) * time.Second })
	var probed []int64
	for i, l := range limits {
		if probes[i] {
			probed = append(probed, l)
			require.GreaterOrEqual(t, l, int64(4))
			continue
		}
		require.GreaterOrEqual(t, l, int64(5))
	}
	assert.Contains(t, limits, int64(5), "it comes down to the floor")
	assert.Contains(t, probed, int64(4), "a probe goes down to the processors")
}

// A limit that does not bind neither grows nor probes: at a steady low
// load there is nothing to learn, and a probe would only shed.
func TestGradientIdlesWhileTheLimitDoesNotBind(t *testing.T) {
	g := newGradient(2)
	now := time.Duration(0)
	for range 100 {
		now += 100 * time.Millisecond
		require.Equal(t, int64(gradInitial), g.update(5*time.Millisecond, 0, 8, now, false, false))
		require.False(t, g.probing())
	}
}

// The queue counts as overloaded when its arrivals outrun its departures
// by a quarter of what the slots serve, not of its own traffic: at
// capacity, the queue takes Poisson bursts by turns, and a few more in
// than out among the few that queue is no overload.
func TestQueueOverloadIsMeasuredAgainstWhatTheSlotsServe(t *testing.T) {
	for _, c := range []struct {
		name    string
		served  int64 // a second
		in, out int
		want    bool
	}{
		{"a burst at capacity", 500, 40, 20, false},              // 20 more, against 25 (a quarter of 100 in 200 ms)
		{"a load over capacity", 500, 60, 30, true},              // 30 more
		{"too few to tell", 500, 9, 0, false},                    // under overloadMin
		{"a bulkhead: against its own traffic", 0, 40, 30, true}, // 40 > 1.25 × 30
		{"a bulkhead, within a quarter", 0, 37, 30, false},
	} {
		q := &queue{size: 1000, maxWait: 200 * time.Millisecond, late: -1}
		q.in, q.out = c.in, c.out
		if got := q.overloaded(100*time.Millisecond, c.served); got != c.want {
			t.Errorf("%s: %d in, %d out, %d served a second: overloaded %v, want %v", c.name, c.in, c.out, c.served, got, c.want)
		}
	}
}
