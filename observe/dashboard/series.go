package dashboard

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// causes are the rejection causes the chart tells apart, by sluice.Cause.
var causes = [...]string{
	sluice.CauseNone:               "other",
	sluice.CauseRateLimited:        sluice.CauseRateLimited.String(),
	sluice.CauseCircuitOpen:        sluice.CauseCircuitOpen.String(),
	sluice.CauseOverloaded:         sluice.CauseOverloaded.String(),
	sluice.CauseConcurrencyLimited: sluice.CauseConcurrencyLimited.String(),
	sluice.CauseTimeout:            sluice.CauseTimeout.String(),
}

const (
	chartSeconds = 60 // what the chart shows
	ringSeconds  = 64 // what the ring keeps: a power of two above chartSeconds

	// Latencies are counted in buckets 4 to an octave from 1024 ns: bucket
	// 0 holds what is shorter, the last what is longer than 2^40 ns.
	latOctaves = 30
	latBuckets = 1 + 4*latOctaves
)

// second is what the calls of one wall-clock second added up to.
type second struct {
	unix     atomic.Int64 // the second it counts; another: stale
	admitted atomic.Uint64
	shadow   atomic.Uint64 // admitted calls a policy in shadow mode rejected
	rejected [len(causes)]atomic.Uint64
	latency  [latBuckets]atomic.Uint32
}

// series keeps the last ringSeconds seconds of calls, in a ring indexed by
// the Unix second. Adding is a few atomic adds; a slot is cleared by the
// first call of its new second, under a lock taken once a second.
type series struct {
	// start is when the series began: the Unix second of a call is found
	// from the monotonic time since, one clock read where time.Now takes
	// two.
	start     time.Time
	startNano int64 // start's Unix time in nanoseconds

	mu   sync.Mutex // clears slots
	ring [ringSeconds]second
}

func (s *series) init() {
	s.start = time.Now()
	s.startNano = s.start.UnixNano()
}

// unix returns the current Unix second.
func (s *series) unix() int64 {
	return (s.startNano + int64(time.Since(s.start))) / int64(time.Second)
}

func (s *series) slot() *second {
	sec := s.unix()
	sl := &s.ring[sec&(ringSeconds-1)]
	if sl.unix.Load() != sec {
		s.mu.Lock()
		if sl.unix.Load() != sec {
			sl.admitted.Store(0)
			sl.shadow.Store(0)
			for i := range sl.rejected {
				sl.rejected[i].Store(0)
			}
			for i := range sl.latency {
				sl.latency[i].Store(0)
			}
			sl.unix.Store(sec)
		}
		s.mu.Unlock()
	}
	return sl
}

// add counts one call that ends now.
func (s *series) add(e *sluice.CallEvent) {
	sl := s.slot()
	if !e.Admitted {
		sl.rejected[e.Cause%sluice.Cause(len(causes))].Add(1)
		return
	}
	sl.admitted.Add(1)
	if e.Shadow {
		sl.shadow.Add(1)
	}
	sl.latency[latBucket(e.Latency)].Add(1)
}

// latBucket is the bucket of latency d.
func latBucket(d time.Duration) int {
	if d < 1024 {
		return 0
	}
	e := bits.Len64(uint64(d)) - 1 // ≥ 10
	i := 1 + (e-10)*4 + int(uint64(d)>>(e-2)&3)
	return min(i, latBuckets-1)
}

// latUpper is the upper bound of bucket i.
func latUpper(i int) time.Duration {
	if i == 0 {
		return 1024
	}
	e, m := (i-1)/4+10, (i-1)%4
	return time.Duration(5+m) << (e - 2)
}

// chart is the series as the page draws it: one point per second, oldest
// first, the last the latest whole second.
type chart struct {
	// Start is the Unix second of the first point.
	Start    int64               `json:"start"`
	Admitted []uint64            `json:"admitted"`
	Rejected map[string][]uint64 `json:"rejected"` // by cause; causes never seen are left out
	// Shadow counts the admitted calls that a policy in shadow mode would
	// have rejected; nil when there were none.
	Shadow []uint64 `json:"shadow"`
	// P50 and P99 are the call latency percentiles in milliseconds, the
	// upper bounds of the buckets they fall in; 0 for a second without
	// calls.
	P50 []float64 `json:"p50"`
	P99 []float64 `json:"p99"`
}

// chart reads the chartSeconds whole seconds before this one.
func (s *series) chart() chart {
	end := s.unix() // the second under way is not whole: left out
	c := chart{Start: end - chartSeconds, Admitted: make([]uint64, chartSeconds),
		Rejected: map[string][]uint64{}, P50: make([]float64, chartSeconds), P99: make([]float64, chartSeconds)}
	var lat [latBuckets]uint32
	for i := range chartSeconds {
		sec := c.Start + int64(i)
		sl := &s.ring[sec&(ringSeconds-1)]
		if sl.unix.Load() != sec {
			continue
		}
		c.Admitted[i] = sl.admitted.Load()
		if n := sl.shadow.Load(); n > 0 {
			if c.Shadow == nil {
				c.Shadow = make([]uint64, chartSeconds)
			}
			c.Shadow[i] = n
		}
		for cause := range sl.rejected {
			n := sl.rejected[cause].Load()
			if n == 0 {
				continue
			}
			r := c.Rejected[causes[cause]]
			if r == nil {
				r = make([]uint64, chartSeconds)
				c.Rejected[causes[cause]] = r
			}
			r[i] = n
		}
		total := uint64(0)
		for b := range lat {
			lat[b] = sl.latency[b].Load()
			total += uint64(lat[b])
		}
		c.P50[i] = quantile(&lat, total, 0.50)
		c.P99[i] = quantile(&lat, total, 0.99)
	}
	return c
}

// quantile is the q-quantile of the total latencies counted in lat, in
// milliseconds.
func quantile(lat *[latBuckets]uint32, total uint64, q float64) float64 {
	if total == 0 {
		return 0
	}
	// The nearest rank: p99 of ten calls is the tenth, the slow one a
	// rank rounded down would hide.
	rank := uint64(math.Ceil(q * float64(total)))
	rank = max(rank, 1)
	seen := uint64(0)
	for b, n := range lat {
		seen += uint64(n)
		if seen >= rank {
			return float64(latUpper(b)) / float64(time.Millisecond)
		}
	}
	return float64(latUpper(latBuckets-1)) / float64(time.Millisecond)
}
