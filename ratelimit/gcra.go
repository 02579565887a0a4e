package ratelimit

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// cacheLine is the padding that keeps a hot state word alone on its cache
// line, so that neighbouring data does not bounce between cores with it.
const cacheLine = 64

// maxTolerance bounds burst × interval, so that an instant plus the tolerance
// never overflows int64 (2^62 ns is about 146 years).
const maxTolerance = int64(1) << 62

// emptyTAT is the theoretical arrival time of a limiter that has seen no
// request: earlier than any instant, so the bucket reads full. Instants may be
// 0 or negative, so 0 cannot mean "unset".
const emptyTAT = math.MinInt64

// paddedTAT is one theoretical arrival time, alone on its cache line.
type paddedTAT struct {
	_ [cacheLine]byte
	v atomic.Int64
	_ [cacheLine - 8]byte
}

// interval returns the time between two events at r, Period/Count rounded up
// to the nanosecond, so a limiter never admits faster than r.
func interval(r Rate) int64 {
	iv := int64(r.Period) / r.Count
	if int64(r.Period)%r.Count != 0 {
		iv++
	}
	return iv
}

// tolerance validates r and burst and returns the interval T and the
// tolerance burst × T.
func tolerance(algorithm string, r Rate, burst int64) (iv, tau int64, err error) {
	if err := r.validate(); err != nil {
		return 0, 0, fmt.Errorf("ratelimit: %s: %w", algorithm, err)
	}
	if burst < 1 {
		return 0, 0, fmt.Errorf("ratelimit: %s: burst %d must be at least 1", algorithm, burst)
	}
	iv = interval(r)
	if burst > maxTolerance/iv {
		return 0, 0, fmt.Errorf("ratelimit: %s: burst %d at rate %v spans more than 2^62ns", algorithm, burst, r)
	}
	return iv, burst * iv, nil
}

// The answers of tatTake.
const (
	tatRejected = iota
	tatAllowed
	tatMoved // the state word was frozen by a reconfiguration: reload and retry
)

// tatFrozen marks a state word whose state has moved to a new configuration
// (see TokenBucket.SetLimit); no instant reaches it.
const tatFrozen = math.MaxInt64

// tatTake is the heart of GCRA and of the token bucket. The state word holds
// the theoretical arrival time tat: the instant at which the bucket is full
// again. A request of cost (n × interval) at now is admitted when
// max(tat, now) + cost - now <= tau, and then moves tat to max(tat, now) + cost.
// It returns max(tat, now) as base and the tat the request would leave.
func tatTake(state *atomic.Int64, now, cost, tau int64) (base, next int64, res int) {
	for {
		tat := state.Load()
		if tat == tatFrozen {
			return 0, 0, tatMoved
		}
		base = max(tat, now)
		next = base + cost
		// Compared without next - now, which overflows when base - now and
		// the cost are both as large as tau may be (2^62).
		if base-now > tau-cost {
			return base, next, tatRejected
		}
		if state.CompareAndSwap(tat, next) {
			return base, next, tatAllowed
		}
	}
}

// tatRefund gives back refund nanoseconds of the state word, for a request
// released after Admit took them. It never moves the word below floor, nor,
// when edge is not nil, below the edge read after the word: a waiting
// reservation raises the edge before it moves the word, so a word that
// holds its turn is read with an edge that protects it.
func tatRefund(state *atomic.Int64, refund, floor int64, edge *atomic.Int64) {
	if refund <= 0 {
		return
	}
	for {
		tat := state.Load()
		if tat == tatFrozen || tat == emptyTAT {
			return
		}
		f := floor
		if edge != nil {
			f = max(f, edge.Load())
		}
		next := max(tat-refund, f)
		if next >= tat || state.CompareAndSwap(tat, next) {
			return
		}
	}
}

// releaseRefund is what a Released outcome gives back of a request of cost n
// admitted latency before now: n × iv, less the part that could have
// regenerated since. Released at the admission instant (latency 0, as a Guard
// without waiting policies releases) it is exact; later it is a lower bound,
// short of exact when the bucket was not full at admission. It never gives
// back more than the request took.
func releaseRefund(n, iv int64, latency time.Duration) int64 {
	return n*iv - max(int64(latency), 0)
}

// tatDecision writes the Decision for a tatTake answer to *d. The hot paths
// fill one Decision in place through a pointer rather than return it from
// call to call: each return of the nine-word Decision through a call costs
// up to 6ns on amd64, where the caller spills it and copies it again.
func tatDecision(d *sluice.Decision, name string, burst, iv, tau, now, base, next int64, res int) {
	if res == tatAllowed {
		*d = allow(name, burst, floorDiv(now+tau-next, iv), time.Duration(next-now))
		return
	}
	*d = reject(name, burst, floorDiv(now+tau-base, iv), time.Duration(base-now), time.Duration(next-tau-now))
}

// floorDiv divides rounding towards negative infinity; b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// GCRA is the generic cell rate algorithm: a token bucket expressed as one
// theoretical arrival time (TAT), the instant at which the bucket would be
// full again.
//
// With interval T = Period/Count (rounded up to the nanosecond) and tolerance
// τ = burst × T, a request of cost n at instant now is admitted when
//
//	max(TAT, now) + n×T - now <= τ
//
// and then sets TAT to max(TAT, now) + n×T. Remaining is
// ⌊(now + τ - TAT)/T⌋, Reset is TAT - now, and a rejection's RetryAfter is
// max(TAT, now) + n×T - τ - now. All arithmetic is in integer nanoseconds;
// the Redis tier keeps the same TAT in Redis.
//
// The state is one atomic int64, updated with compare-and-swap on its own
// cache line: a decision takes no lock and allocates nothing. A clock that
// jumps backwards never admits extra: TAT stays where it was, so the limiter
// rejects until the clock has caught up.
//
// Create one with NewGCRA; the zero value is not usable. A GCRA is safe for
// concurrent use.
type GCRA struct {
	cfg  atomic.Pointer[bucketConfig] // its edge is unused: a GCRA has no reservations
	mu   sync.Mutex                   // serialises SetLimit
	name string
}

// NewGCRA returns a GCRA admitting r on average with bursts of up to burst
// requests at once. It starts full. It returns an error when r is invalid,
// burst < 1, or burst × interval exceeds 2^62ns.
func NewGCRA(r Rate, burst int64, opts ...Option) (*GCRA, error) {
	iv, tau, err := tolerance("gcra", r, burst)
	if err != nil {
		return nil, err
	}
	o, err := buildOptions("gcra", false, opts)
	if err != nil {
		return nil, err
	}
	c := &bucketConfig{iv: iv, tau: tau, burst: burst, rate: r, since: math.MinInt64}
	c.tat.v.Store(emptyTAT)
	c.edge.Store(emptyTAT)
	g := &GCRA{name: o.name}
	g.cfg.Store(c)
	return g, nil
}

// SetLimit changes the rate and the burst, validated as NewGCRA validates
// them: on an error nothing changes. The limiter keeps its theoretical
// arrival time, the instant it is full again, as the Redis GCRA does: a
// full limiter is full at its new size, and one that lacks tokens repays
// the same time. Safe while requests are decided; when the rate changes, a
// request admitted before the limiter is full again and released after the
// change gives nothing back.
func (g *GCRA) SetLimit(r Rate, burst int64) error {
	return setBucket(&g.cfg, &g.mu, "gcra", r, burst, keepTAT)
}

// Name returns the name given with WithName; default "ratelimit/gcra".
func (g *GCRA) Name() string { return g.name }

// rateWindow returns the time the limiter takes to refill its whole burst, burst
// × interval: the w of the RateLimit-Policy header field.
func (g *GCRA) rateWindow() time.Duration { return time.Duration(g.cfg.Load().tau) }

// allowNAt is AllowN at instant now: the bare answer, with no ticket.
func (g *GCRA) allowNAt(now time.Duration, n int64) bool {
	n = max(n, 1)
	for {
		c := g.cfg.Load()
		if n > c.burst {
			return false
		}
		_, _, res := tatTake(&c.tat.v, int64(now), n*c.iv, c.tau)
		if res != tatMoved {
			return res == tatAllowed
		}
		runtime.Gosched() // SetLimit froze the state
	}
}

func (g *GCRA) decide(d *sluice.Decision, now time.Duration, n int64) {
	n = max(n, 1)
	for {
		c := g.cfg.Load()
		if n > c.burst {
			base := c.tat.v.Load()
			if base == tatFrozen {
				runtime.Gosched()
				continue
			}
			base = max(base, int64(now))
			*d = never(g.name, c.burst, floorDiv(int64(now)+c.tau-base, c.iv), time.Duration(base-int64(now)))
			return
		}
		base, next, res := tatTake(&c.tat.v, int64(now), n*c.iv, c.tau)
		if res != tatMoved {
			tatDecision(d, g.name, c.burst, c.iv, c.tau, int64(now), base, next, res)
			return
		}
		runtime.Gosched()
	}
}

// Done gives back, on sluice.Released, the quota that Admit took, less what
// has regenerated in the latency since, unless a SetLimit that changed the
// rate came between (see SetLimit); other outcomes change nothing.
func (g *GCRA) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	if o != sluice.Released || t == 0 {
		return
	}
	c := g.cfg.Load()
	// The ticket is the cost admitted, which may exceed a burst lowered
	// since (SetLimit at the same rate): give back what it took all the
	// same, as the token bucket does. Admitted before a SetLimit at another
	// rate, it gives back nothing.
	if int64(t) > maxTolerance/c.iv || int64(now-max(latency, 0)) <= c.since {
		return
	}
	tatRefund(&c.tat.v, releaseRefund(int64(t), c.iv, latency), math.MinInt64, nil)
}
