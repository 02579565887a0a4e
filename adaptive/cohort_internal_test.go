package adaptive

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// probeLoad drives s from a single goroutine at injected instants: one
// request a millisecond, each ending lat(now) after it was admitted.
type probeLoad struct {
	s    *Shedder
	keep func(t sluice.Ticket) bool // a call kept running, never ended by run
	now  time.Duration
	ends []probeEnd
}

type probeEnd struct {
	at  time.Duration
	t   sluice.Ticket
	lat time.Duration
}

func (l *probeLoad) run(d time.Duration, lat func(now time.Duration) time.Duration, until func() bool) {
	ctx := context.Background()
	for end := l.now + d; l.now < end; l.now += time.Millisecond {
		sort.Slice(l.ends, func(i, j int) bool { return l.ends[i].at < l.ends[j].at })
		for len(l.ends) > 0 && l.ends[0].at <= l.now {
			e := l.ends[0]
			l.ends = l.ends[1:]
			l.s.Done(e.t, sluice.Success, l.now, e.lat)
		}
		if until != nil && until() {
			return
		}
		if tk, _, err := l.s.Admit(ctx, l.now); err == nil {
			if l.keep != nil && l.keep(tk) {
				continue
			}
			x := lat(l.now)
			l.ends = append(l.ends, probeEnd{at: l.now + x, t: tk, lat: x})
		}
	}
}

func constLat(d time.Duration) func(time.Duration) time.Duration {
	return func(time.Duration) time.Duration { return d }
}

// A ticket keeps its epoch modulo 2^12 only, and its cohort place in its
// top bits. A long call (a stream) that took a place in a probe's cohort
// and ends 4096 epochs later (half an hour of probes a second apart) while
// a probe runs has that probe's epoch and place: taken for one of its ten
// latencies, its half hour set the baseline at minutes, and for the
// seconds the baseline took to come back down the limit rose unchecked.
// A place holds its request's grant instant, which the stream's is not.
func TestCohortTakesNoTicketOfAnEarlierProbe(t *testing.T) {
	s, err := NewShedder(WithQueue(0, 0)) // run admits from one goroutine: no wait
	if err != nil {
		t.Fatal(err)
	}
	l := &probeLoad{s: s, now: time.Second}
	probing := func() bool { return s.probing.Load() }
	// 5 ms calls, 5 in flight under a limit of 20: the limit does not bind.
	l.run(2*time.Second, constLat(5*time.Millisecond), nil)
	// The dependency turns slower: a rise while the limit does not bind
	// asks for a probe.
	l.run(2*time.Second, constLat(10*time.Millisecond), probing)
	if !probing() {
		t.Fatal("no probe was asked for")
	}
	// A stream is admitted among the probe's first: it takes a place in
	// its cohort.
	var stream sluice.Ticket
	var streamStart time.Duration
	l.keep = func(tk sluice.Ticket) bool {
		if stream == 0 && uint64(tk)>>slotShift != 0 {
			stream, streamStart = tk, l.now
			return true
		}
		return false
	}
	l.run(5*time.Second, constLat(10*time.Millisecond), func() bool { return !probing() })
	if stream == 0 {
		t.Fatal("the stream took no place in the cohort")
	}
	l.run(3*time.Second, constLat(10*time.Millisecond), nil)
	// 4096 epochs later (the probes of about 35 minutes, one a second,
	// stood for here by the epoch moved on; the probe's own start adds
	// the last one), the dependency slows again, and a probe is asked for.
	l.now += 35 * time.Minute
	streamEpoch := uint64(stream) >> ticketBits & (1<<epochBits - 1)
	s.epoch.Add(1<<epochBits - 1 - (s.epoch.Load()-streamEpoch)&(1<<epochBits-1))
	l.run(2*time.Second, constLat(20*time.Millisecond), probing)
	if !probing() {
		t.Fatal("no second probe was asked for")
	}
	if !s.ofEpoch(stream) {
		t.Fatalf("set-up: the stream's epoch %d does not match %d", uint64(stream)>>ticketBits, s.epoch.Load())
	}
	// The stream ends now, half an hour on.
	s.Done(stream, sluice.Success, l.now, l.now-streamStart)
	l.run(5*time.Second, constLat(20*time.Millisecond), func() bool { return !probing() })
	st := s.Stats()
	t.Logf("after the probe: baseline %v, limit %d", st.Baseline, st.Limit)
	if st.Baseline > 100*time.Millisecond {
		t.Errorf("baseline %v: a call of another probe, 4096 epochs ago, was measured in this one's cohort", st.Baseline)
	}
	l.run(time.Second, constLat(20*time.Millisecond), nil)
	t.Logf("a second later: baseline %v, limit %d", s.Stats().Baseline, s.Stats().Limit)
}

// A dependency turned slower while the limit does not bind, at a low
// rate: 10 requests a second, 100 ms calls turned 600 ms (1 in flight,
// then 6, under a limit of 20); 5 a second, 100 ms turned 1.5 s (7.5 in
// flight), slower than a probe waits for its cohort. The rise asks for a
// probe, whose cohort has not ended a second on: its calls still running
// are slow, not cut short by a deadline, and their ages tell no fall of
// the latency. (Counted as bounds, they made the probe cut the limit to
// its floor of 3 and a third of the next 10 s was shed; counted as
// measures of a fall, the probe descended, found a baseline of 100 ms,
// and shed 44 of 125.)
func TestShedderProbesASlowDependencyAtALowRate(t *testing.T) {
	for _, c := range []struct {
		every, slow, run time.Duration
	}{
		{100 * time.Millisecond, 600 * time.Millisecond, 15 * time.Second},
		{200 * time.Millisecond, 1500 * time.Millisecond, 25 * time.Second},
	} {
		s, err := NewShedder(WithQueue(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		now := time.Second
		var ends []probeEnd
		admitted, rejected := 0, 0
		for at := time.Duration(0); at < c.run; at += time.Millisecond {
			sort.Slice(ends, func(i, j int) bool { return ends[i].at < ends[j].at })
			for len(ends) > 0 && ends[0].at <= now {
				s.Done(ends[0].t, sluice.Success, now, ends[0].lat)
				ends = ends[1:]
			}
			if at%c.every == 0 {
				lat := 100 * time.Millisecond
				if at >= 5*time.Second {
					lat = c.slow
				}
				if tk, _, err := s.Admit(ctx, now); err != nil {
					rejected++
				} else {
					admitted++
					ends = append(ends, probeEnd{at: now + lat, t: tk, lat: lat})
				}
			}
			now += time.Millisecond
		}
		st := s.Stats()
		t.Logf("calls of %v: admitted %d, rejected %d; limit %d, baseline %v", c.slow, admitted, rejected, st.Limit, st.Baseline)
		if rejected > 10 {
			t.Errorf("calls of %v: %d of %d requests shed after a dependency turned slower, with no queue under a limit of 20", c.slow, rejected, admitted+rejected)
		}
	}
}
