package ratelimit

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

func mustSlidingLog(t testing.TB, limit int64, window time.Duration, opts ...Option) *SlidingLog {
	t.Helper()
	l, err := NewSlidingLog(limit, window, opts...)
	require.NoError(t, err)
	return l
}

func TestSlidingLogSteps(t *testing.T) {
	l := mustSlidingLog(t, 3, 100*ms)
	runSteps(t, l, []step{
		{at: 10 * ms, allowed: true, remaining: 2, reset: 100 * ms},
		{at: 30 * ms, allowed: true, remaining: 1, reset: 100 * ms},
		{at: 60 * ms, allowed: true, remaining: 0, reset: 100 * ms},
		// Full until the entry of 10ms leaves at 110ms.
		{at: 70 * ms, allowed: false, remaining: 0, reset: 90 * ms, retryAfter: 40 * ms},
		{at: 70 * ms, n: 2, allowed: false, remaining: 0, reset: 90 * ms, retryAfter: 60 * ms},
		{at: 109 * ms, allowed: false, remaining: 0, reset: 51 * ms, retryAfter: ms},
		{at: 110 * ms, allowed: true, remaining: 0, reset: 100 * ms},
		// The clock steps back: the log is read at its newest entry, 110ms.
		{at: 20 * ms, allowed: false, remaining: 0, reset: 190 * ms, retryAfter: 110 * ms},
		// The entry of 30ms has left; a released request leaves no trace.
		{at: 130 * ms, allowed: true, remaining: 0, reset: 100 * ms, release: true},
		{at: 130 * ms, allowed: true, remaining: 0, reset: 100 * ms},
		{at: 135 * ms, n: 4, allowed: false, remaining: 0, reset: 95 * ms, retryAfter: 0},
	})
	require.ErrorIs(t, decideAt(l, 135*ms, 4).Cause, ErrNeverSatisfiable)
}

// logModel is the sliding log's definition, computed naively: the units of
// the requests logged in (t-window, t] never exceed the limit, an instant
// before the newest one decided at is read as that one, and a released
// request is forgotten.
type logModel struct {
	limit   int64
	window  time.Duration
	entries []logEntry
	last    time.Duration
	seq     uint64
}

func (m *logModel) decide(now time.Duration, n int64) (sluice.Decision, uint64) {
	at := max(now, m.last)
	m.last = at
	var live []logEntry
	var total int64
	for _, e := range m.entries {
		if e.at > at-m.window && e.n > 0 {
			live = append(live, e)
			total += e.n
		}
	}
	m.entries = live
	reset := time.Duration(0)
	if len(live) > 0 {
		reset = live[len(live)-1].at + m.window - now
	}
	if n > m.limit {
		return never("m", m.limit, m.limit-total, reset), 0
	}
	if total+n > m.limit {
		var freed int64
		for _, e := range live {
			if freed += e.n; freed >= total+n-m.limit {
				return reject("m", m.limit, m.limit-total, reset, e.at+m.window-now), 0
			}
		}
	}
	m.seq++
	m.entries = append(m.entries, logEntry{at: at, n: n, seq: m.seq})
	return allow("m", m.limit, m.limit-total-n, at+m.window-now), m.seq
}

func (m *logModel) release(seq uint64) {
	for i := range m.entries {
		if m.entries[i].seq == seq {
			m.entries[i].n = 0
		}
	}
}

// TestSlidingLogMatchesItsDefinition drives the log and the naive model
// through the same random requests, releases (in any order) and backward
// steps of the clock, and compares every decision.
func TestSlidingLogMatchesItsDefinition(t *testing.T) {
	for _, limit := range []int64{1, 3, 8, 50} {
		l := mustSlidingLog(t, limit, 100*ms)
		m := &logModel{limit: limit, window: 100 * ms}
		r := rand.New(rand.NewPCG(uint64(limit), 1))
		type held struct {
			tk  sluice.Ticket
			seq uint64
		}
		var pending []held
		now := time.Duration(0)
		for i := range 8000 {
			switch r.IntN(10) {
			case 0:
				now -= time.Duration(r.IntN(30)) * ms
			default:
				now += time.Duration(r.IntN(int(20*ms)/int(limit) + 1))
			}
			n := 1 + r.Int64N(min(limit, 4)+1)
			d, tk := l.decide(now, n, true)
			want, seq := m.decide(now, n)
			want.Policy = d.Policy
			require.Equal(t, want, d, "call %d at %v, n=%d", i, now, n)
			if d.Allowed && r.IntN(3) == 0 {
				pending = append(pending, held{tk, seq})
			}
			if len(pending) > 0 && r.IntN(4) == 0 {
				j := r.IntN(len(pending))
				l.Done(pending[j].tk, sluice.Released, now, 0)
				m.release(pending[j].seq)
				pending = append(pending[:j], pending[j+1:]...)
			}
			require.LessOrEqual(t, len(l.ring), int(2*limit))
		}
	}
}

func TestSlidingLogValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  int64
		window time.Duration
	}{
		{"zero limit", 0, time.Second},
		{"negative limit", -5, time.Second},
		{"limit too large", 1<<20 + 1, time.Second},
		{"zero window", 10, 0},
		{"negative window", 10, -time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewSlidingLog(tc.limit, tc.window)
			require.Error(t, err)
			require.Nil(t, l)
		})
	}
}

func TestSlidingLogClockAndName(t *testing.T) {
	clk := sluice.NewManualClock(0)
	l := mustSlidingLog(t, 2, time.Second, WithName("ratelimit/otp"))
	assert.Equal(t, "ratelimit/otp", l.Name())
	assert.True(t, l.allowNAt(clk.Now(), 1))
	clk.Advance(999 * ms)
	assert.True(t, l.allowNAt(clk.Now(), 1))
	assert.False(t, l.allowNAt(clk.Now(), 1))
	clk.Advance(ms)
	assert.True(t, l.allowNAt(clk.Now(), 1))
	assert.False(t, l.allowNAt(clk.Now(), 1))
}

func TestSlidingLogConformance(t *testing.T) {
	rateConformance(t, func(t *testing.T) sluice.Policy { return mustSlidingLog(t, 10, 50*ms) })
}

func TestSlidingLogAllocatesNothing(t *testing.T) {
	assertAllocFree(t, mustSlidingLog(t, 100, 10*ms), 10*time.Microsecond)
}

func TestSlidingLogConcurrentNeverOver(t *testing.T) {
	const limit, window = 50, 10 * ms
	l := mustSlidingLog(t, limit, window)
	start, end, admitted := hammer(t, l, 20*time.Microsecond)
	// Every instant logged lies in [start, end]: cut it into windows.
	bound := limit * ((int64(end-start) + int64(window)) / int64(window))
	t.Logf("admitted %d, bound %d", admitted, bound)
	assert.LessOrEqual(t, admitted, bound)
	assert.Positive(t, admitted)
}

// A window too long for entry+window to fit an int64 (math.MaxInt64 for "n
// ever") still holds its limit.
func TestSlidingLogHugeWindowHoldsItsLimit(t *testing.T) {
	for _, c := range []struct {
		window time.Duration
		at     time.Duration
	}{{math.MaxInt64, 1}, {1 << 62, 1 << 62}} {
		l, err := NewSlidingLog(1, c.window)
		if err != nil {
			t.Fatal(err)
		}
		if !l.allowNAt(c.at, 1) {
			t.Fatalf("window %v: the first request refused", c.window)
		}
		if d := decideAt(l, c.at+1, 1); d.Allowed {
			t.Errorf("window %v: a second request admitted: %+v", c.window, d)
		}
	}
}

// A decision that finds the clock ahead drops the entries that have left
// the window as of that instant. A request that comes afterwards at an
// older instant must then count as of that instant too: logged at an older
// one, it leaves the window too early, and the window holds more than the
// limit.
func TestSlidingLogLateCallerAfterExpiryDoesNotOverAdmit(t *testing.T) {
	l := mustSlidingLog(t, 2, 10*time.Second)
	require.True(t, l.allowNAt(0, 1))
	require.True(t, l.allowNAt(5*time.Second, 1))
	// At 12s the entry of 0s has left the window; 2 more do not fit.
	require.False(t, l.allowNAt(12*time.Second, 2))
	// A late caller at 4s finds room, the entry of 0s being gone: it is
	// counted as of 12s, not as of 4s nor 5s, when the 0s entry was still in.
	n := 0
	if l.allowNAt(4*time.Second, 1) {
		n++
	}
	// At 15s the entry of 5s has left, the late one not: one more fits.
	for range 2 {
		if l.allowNAt(15*time.Second, 1) {
			n++
		}
	}
	assert.Equal(t, 2, n, "admitted in (5s, 15s] besides the entry of 5s")
}
