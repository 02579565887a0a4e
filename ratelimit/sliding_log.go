package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policywindow"
)

// SlidingLog admits at most limit cost units in any window of length window,
// exactly: it remembers when each admitted request came and admits a new one
// only if the units admitted in (now-window, now] leave room for it.
//
// The log is a ring of (instant, cost) entries, one per admitted request, so
// it holds at most limit live entries; it starts small and grows up to twice
// limit entries (24 bytes each), reusing them in place. A decision is O(1)
// amortized under a mutex; a rejection walks the oldest entries until enough
// units would have left to compute RetryAfter.
//
// An instant older than the newest one decided at (a clock stepping
// backwards, or a late caller) is counted and logged at that newest instant,
// so it never admits extra. Make one with NewSlidingLog; the zero value is
// not usable.
type SlidingLog struct {
	mu    sync.Mutex
	ring  []logEntry // entries ring[(head+i) % len], i < size, oldest first
	head  int
	size  int
	total int64         // units of the live entries
	last  time.Duration // newest instant decided at; math.MinInt64 at first
	seq   uint64        // sequence number of the newest entry ever logged

	limit  int64
	window time.Duration
	name   string
}

type logEntry struct {
	at  time.Duration
	n   int64 // 0 once released
	seq uint64
}

// NewSlidingLog returns a limiter that admits at most limit cost units in any
// window of length window.
//
// It fails when limit < 1, window <= 0, or limit is above 2^20 (the log
// would grow to tens of megabytes; a SlidingWindow counts any limit in one
// word per bucket).
func NewSlidingLog(limit int64, window time.Duration, opts ...Option) (*SlidingLog, error) {
	o, err := buildOptions("sliding-log", false, opts)
	if err != nil {
		return nil, err
	}
	if err := checkLog(limit, window); err != nil {
		return nil, err
	}
	return &SlidingLog{
		ring:  make([]logEntry, min(limit, 16)),
		last:  math.MinInt64,
		limit: limit, window: window, name: o.name,
	}, nil
}

func checkLog(limit int64, window time.Duration) error {
	switch {
	case limit < 1:
		return fmt.Errorf("ratelimit: sliding log: limit %d must be at least 1", limit)
	case limit > 1<<20:
		return fmt.Errorf("ratelimit: sliding log: limit %d is above 2^20; use a sliding window", limit)
	case window <= 0:
		return fmt.Errorf("ratelimit: sliding log: window %v must be positive", window)
	}
	return nil
}

// SetLimit changes the limit and the window, validated as NewSlidingLog
// validates them: on an error nothing changes. The log is kept: every
// logged request counts against the new limit until it is older than the
// new window. Safe while requests are decided.
func (l *SlidingLog) SetLimit(limit int64, window time.Duration) error {
	defer policywindow.Changed() // once the new window is in place
	if err := checkLog(limit, window); err != nil {
		return err
	}
	l.mu.Lock()
	l.limit, l.window = limit, window
	l.mu.Unlock()
	return nil
}

// Name returns the limiter's name, "ratelimit/sliding-log" unless set with
// WithName.
func (l *SlidingLog) Name() string { return l.name }

// rateWindow returns the window's length.
func (l *SlidingLog) rateWindow() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.window
}

// admitD decides as Admit does, with its answer as a Decision.
func (l *SlidingLog) admitD(ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	return l.decide(now, sluice.CostFrom(ctx), true)
}

// Done removes the admitted request from the log when o is sluice.Released
// and it is still in the window; other outcomes change nothing.
func (l *SlidingLog) Done(t sluice.Ticket, o sluice.Outcome, _, _ time.Duration) {
	if o != sluice.Released || t == 0 {
		return
	}
	seq := uint64(t)
	l.mu.Lock()
	defer l.mu.Unlock()
	// Entries are in sequence order: binary search among the live ones.
	lo, hi := 0, l.size
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.at(m).seq < seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == l.size || l.at(lo).seq != seq {
		return // already left the window
	}
	e := l.at(lo)
	l.total -= e.n
	e.n = 0
	// Trim released entries at both ends so they take no room.
	for l.size > 0 && l.at(l.size-1).n == 0 {
		l.size--
	}
	for l.size > 0 && l.at(0).n == 0 {
		l.popFront()
	}
}

// allowNAt decides on a request of cost n at now, taking its quota when it
// is admitted: the bare answer, with no ticket, of the step tables in tests.
func (l *SlidingLog) allowNAt(now time.Duration, n int64) bool {
	_, tk := l.decide(now, n, false)
	return tk != 0
}

// at returns the i-th live entry, oldest first.
func (l *SlidingLog) at(i int) *logEntry {
	j := l.head + i
	if j >= len(l.ring) {
		j -= len(l.ring)
	}
	return &l.ring[j]
}

func (l *SlidingLog) popFront() {
	l.total -= l.ring[l.head].n
	l.head++
	if l.head == len(l.ring) {
		l.head = 0
	}
	l.size--
}

// push appends an entry. A full ring grows (doubling) up to twice the limit;
// once there, the released entries are squeezed out in place: the live ones
// hold at most limit units of at least 1 each, so that frees half the ring.
func (l *SlidingLog) push(e logEntry) {
	if l.size == len(l.ring) {
		if c := min(2*len(l.ring), 2*int(l.limit)); c > len(l.ring) {
			ring := make([]logEntry, c)
			for i := range l.size {
				ring[i] = *l.at(i)
			}
			l.ring, l.head = ring, 0
		} else {
			k := 0
			for i := range l.size {
				if e := *l.at(i); e.n > 0 {
					*l.at(k) = e
					k++
				}
			}
			l.size = k
		}
	}
	*l.at(l.size) = e
	l.size++
}

// resetLocked returns the time from now until every logged unit has left.
func (l *SlidingLog) resetLocked(now time.Duration) time.Duration {
	for i := l.size - 1; i >= 0; i-- {
		if e := l.at(i); e.n > 0 {
			return e.at + l.window - now
		}
	}
	return 0
}

// decide decides on a request of cost n at now and logs it when it admits.
// It returns a ticket, never 0, when it admits; and the Decision only when
// full is set.
func (l *SlidingLog) decide(now time.Duration, n int64, full bool) (sluice.Decision, sluice.Ticket) {
	n = max(n, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	// Never decide before the newest instant decided at: the entries that
	// left the window as of that instant are gone, so a request at an older
	// one is counted (and logged) as of it.
	at := max(now, l.last)
	l.last = at
	// The time since the entry, not entry+window, which overflows for a
	// window near MaxInt64; entries are never logged after at.
	for l.size > 0 && uint64(at-l.at(0).at) >= uint64(l.window) {
		l.popFront()
	}
	if !full && l.total+n > l.limit {
		return sluice.Decision{}, 0
	}
	if n > l.limit {
		return never(l.name, l.limit, l.limit-l.total, l.resetLocked(now)), 0
	}
	if l.total+n > l.limit {
		need, freed := l.total+n-l.limit, int64(0)
		retry := time.Duration(0)
		for i := range l.size {
			e := l.at(i)
			if freed += e.n; freed >= need {
				retry = e.at + l.window - now
				break
			}
		}
		return reject(l.name, l.limit, l.limit-l.total, l.resetLocked(now), retry), 0
	}
	l.seq++
	l.push(logEntry{at: at, n: n, seq: l.seq})
	l.total += n
	if !full {
		return sluice.Decision{}, sluice.Ticket(l.seq)
	}
	return allow(l.name, l.limit, l.limit-l.total, at+l.window-now), sluice.Ticket(l.seq)
}
