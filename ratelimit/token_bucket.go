package ratelimit

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/policywindow"
)

// ErrWouldExceedDeadline is the cause of a rejection by a waiting method
// (TokenBucket.WaitN, Shaper.Admit) when the wait for the
// request's turn would outlast the context's deadline. It wraps
// sluice.ErrRateLimited. The limiter rejects at once instead of waiting in
// vain, and takes nothing.
var ErrWouldExceedDeadline = fmt.Errorf("%w: the wait would outlast the context's deadline", sluice.ErrRateLimited)

// bucketConfig is one configuration of a TokenBucket with its own state word.
// A change of rate or burst moves the state to a new bucketConfig; the old
// word is frozen, so a decision racing with the change retries on the new one.
type bucketConfig struct {
	tat   paddedTAT
	iv    int64 // interval between two tokens, ns
	tau   int64 // burst × iv
	burst int64
	rate  Rate
	// edge is the highest TAT left by a reservation that had to wait. A
	// release never moves TAT below it, so a waiting reservation's turn is
	// never shared with a newcomer.
	edge atomic.Int64
	// since, for a GCRA, is the TAT at the SetLimit that made this
	// configuration: an admission before it was charged at another rate,
	// and its release gives nothing back. A TokenBucket converts instead.
	since int64
	// at, for a TokenBucket, is the instant of the SetLimit that made
	// this configuration (math.MinInt64 for the first), and prevIv and
	// prevAt the interval and instant of the one before: a release of an
	// admission before at counts what refilled before at at prevIv.
	at, prevIv, prevAt int64
}

// TokenBucket is a token bucket of burst tokens refilled at a Rate: a request
// of cost n takes n tokens, and is admitted when the bucket holds them.
//
// The bucket is kept as the instant TAT at which it will be full again, the
// same state as GCRA, in one atomic word on its own cache line: Allow takes no
// lock and allocates nothing. Unlike GCRA, a token bucket also reserves tokens
// ahead of time (Wait, WaitN: the bucket may then run into debt, repaid by
// the refill), and its rate and burst can change at runtime (SetLimit),
// keeping the tokens it holds.
//
// Most callers want Allow (drop what exceeds the rate) or Wait (delay it);
// in a Guard, Admit decides. For parity with golang.org/x/time/rate, and
// only on this limiter, the methods that read the clock to decide have an
// …At form taking the monotonic instant instead (AllowAt, AllowNAt,
// TokensAt), so that a caller porting code written for rate.Limiter keeps
// its shape (its reservations are reached through Wait and WaitN alone;
// SetLimit reads the bucket's clock); the other limiters take instants
// through Admit alone. A clock that jumps backwards never admits extra: the bucket
// waits until the clock has caught up.
//
// Create one with NewTokenBucket; the zero value is not usable. A TokenBucket
// is safe for concurrent use.
type TokenBucket struct {
	cfg      atomic.Pointer[bucketConfig]
	mu       sync.Mutex // serialises SetLimit
	name     string
	clock    sluice.Clock
	sysClock bool
}

// NewTokenBucket returns a full token bucket of burst tokens refilled at r.
// It returns an error when r is invalid, burst < 1, or burst × interval
// exceeds 2^62ns.
func NewTokenBucket(r Rate, burst int64, opts ...Option) (*TokenBucket, error) {
	c, err := newBucketConfig(r, burst)
	if err != nil {
		return nil, err
	}
	o, err := buildOptions("token-bucket", true, opts)
	if err != nil {
		return nil, err
	}
	c.tat.v.Store(emptyTAT)
	c.edge.Store(emptyTAT)
	tb := &TokenBucket{name: o.name, clock: o.clock, sysClock: o.clock == sluice.SystemClock}
	tb.cfg.Store(c)
	return tb, nil
}

func newBucketConfig(r Rate, burst int64) (*bucketConfig, error) {
	iv, tau, err := tolerance("token bucket", r, burst)
	if err != nil {
		return nil, err
	}
	return &bucketConfig{iv: iv, tau: tau, burst: burst, rate: r, at: math.MinInt64}, nil
}

func (tb *TokenBucket) now() time.Duration {
	if tb.sysClock {
		return monoclock.Now()
	}
	return tb.clock.Now()
}

// Name returns the name given with WithName; default "ratelimit/token-bucket".
func (tb *TokenBucket) Name() string { return tb.name }

// Rate returns the current refill rate.
func (tb *TokenBucket) Rate() Rate { return tb.cfg.Load().rate }

// Burst returns the current capacity of the bucket.
func (tb *TokenBucket) Burst() int64 { return tb.cfg.Load().burst }

// Tokens returns the tokens the bucket holds now, reading its clock;
// shorthand for TokensAt(clock.Now()).
func (tb *TokenBucket) Tokens() float64 { return tb.TokensAt(tb.now()) }

// TokensAt returns the tokens the bucket holds at instant now: at most the
// burst, negative while reservations keep it in debt.
func (tb *TokenBucket) TokensAt(now time.Duration) float64 {
	c, base := tb.state(int64(now))
	return float64(int64(now)+c.tau-base) / float64(c.iv)
}

// state returns the current configuration and max(TAT, now).
func (tb *TokenBucket) state(now int64) (*bucketConfig, int64) {
	for {
		c := tb.cfg.Load()
		if tat := c.tat.v.Load(); tat != tatFrozen {
			return c, max(tat, now)
		}
		runtime.Gosched()
	}
}

// Allow reports whether one token is available now, and takes it if so;
// shorthand for AllowNAt(clock.Now(), 1).
func (tb *TokenBucket) Allow() bool {
	var now time.Duration
	if tb.sysClock {
		now = monoclock.Now() // inlined: one read of the runtime's clock
	} else {
		now = tb.clock.Now()
	}
	c := tb.cfg.Load()
	if _, _, res := tatTake(&c.tat.v, int64(now), c.iv, c.tau); res != tatMoved {
		return res == tatAllowed
	}
	return tb.allowOne(int64(now)) // SetLimit froze the state
}

// AllowN reports whether n tokens are available now, and takes them if so;
// shorthand for AllowNAt(clock.Now(), n).
func (tb *TokenBucket) AllowN(n int64) bool { return tb.AllowNAt(tb.now(), n) }

// AllowAt reports whether one token is available at instant now, and takes it
// if so.
func (tb *TokenBucket) AllowAt(now time.Duration) bool { return tb.allowOne(int64(now)) }

// allowOne is AllowNAt for one token, the common case, kept small.
func (tb *TokenBucket) allowOne(now int64) bool {
	for {
		c := tb.cfg.Load()
		_, _, res := tatTake(&c.tat.v, now, c.iv, c.tau)
		if res != tatMoved {
			return res == tatAllowed
		}
		runtime.Gosched()
	}
}

// AllowNAt reports whether n tokens (below 1 counts as 1) are available at
// instant now, and takes them if so. More than the burst is never available.
func (tb *TokenBucket) AllowNAt(now time.Duration, n int64) bool {
	n = max(n, 1)
	for {
		c := tb.cfg.Load()
		if n > c.burst {
			return false
		}
		_, _, res := tatTake(&c.tat.v, int64(now), n*c.iv, c.tau)
		if res != tatMoved {
			return res == tatAllowed
		}
		runtime.Gosched()
	}
}

// allowNAt is AllowNAt, the bare answer a Keyed asks its key limiters for.
func (tb *TokenBucket) allowNAt(now time.Duration, n int64) bool { return tb.AllowNAt(now, n) }

func (tb *TokenBucket) decide(d *sluice.Decision, now time.Duration, n int64) {
	n = max(n, 1)
	for {
		c := tb.cfg.Load()
		if n > c.burst {
			c, base := tb.state(int64(now))
			if n <= c.burst {
				continue // the burst grew meanwhile
			}
			*d = never(tb.name, c.burst, floorDiv(int64(now)+c.tau-base, c.iv), time.Duration(base-int64(now)))
			return
		}
		base, next, res := tatTake(&c.tat.v, int64(now), n*c.iv, c.tau)
		if res != tatMoved {
			tatDecision(d, tb.name, c.burst, c.iv, c.tau, int64(now), base, next, res)
			return
		}
		runtime.Gosched()
	}
}

// admitD decides as Admit does, with its answer as a Decision.
func (tb *TokenBucket) admitD(ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	n := sluice.CostFrom(ctx)
	var d sluice.Decision
	tb.decide(&d, now, n)
	return d, sluice.Ticket(n)
}

// Done gives back, on sluice.Released, the tokens that Admit took, less what
// has refilled in the latency since (at the rate of each SetLimit in turn;
// nothing after two); other outcomes change nothing. A
// release never hands a newcomer tokens ahead of the turn of a reservation
// that had to wait for them: what it would give back below that turn is
// lost.
func (tb *TokenBucket) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	if o != sluice.Released || t == 0 || t > math.MaxInt64 {
		return
	}
	for {
		c := tb.cfg.Load()
		// The ticket is the cost admitted, which may exceed a burst lowered
		// since (SetLimit): give back what it took all the same. The refund
		// stays within n × interval, above the edge of waiting
		// reservations, and the bucket within its burst.
		if int64(t) > maxTolerance/c.iv {
			return
		}
		if c.tat.v.Load() == tatFrozen {
			runtime.Gosched()
			continue
		}
		refund := releaseRefund(int64(t), c.iv, latency)
		if admitted := int64(now - max(latency, 0)); admitted < c.at {
			// Admitted before the SetLimit that made c: what refilled
			// until then came at the interval before, and is worth
			// c.iv/c.prevIv of it now. Before an earlier SetLimit still,
			// nothing is given back.
			if admitted < c.prevAt {
				return
			}
			before := convertTAT(c.at, admitted, c.prevIv, c.iv) - admitted
			refund = int64(t)*c.iv - before - max(int64(now)-c.at, 0)
		}
		tatRefund(&c.tat.v, refund, math.MinInt64, &c.edge)
		return
	}
}

// reservation is a promise of tokens at a future instant, made by WaitN,
// which cancels it when its context ends first. Only the last reservation
// gives its tokens back when cancelled (see cancelAt). Its zero value is a
// reservation that was not granted.
type reservation struct {
	tb  *TokenBucket
	cfg *bucketConfig
	n   int64
	tat int64 // the bucket's TAT right after this reservation
	act int64 // the instant the tokens are there
	// edge is the bucket's edge before this reservation raised it to tat,
	// when raised: it had to wait, and found the edge below its turn.
	edge   int64
	raised bool
	ok     bool
	done   bool // cancelled
}

// delayFrom returns how long to wait from instant now before the reserved
// tokens are there; 0 when they already are, math.MaxInt64 when the
// reservation was not granted.
func (r reservation) delayFrom(now time.Duration) time.Duration {
	if !r.ok {
		return math.MaxInt64
	}
	return time.Duration(max(r.act-int64(now), 0))
}

// cancelAt gives the reservation up at instant now. It gives its tokens
// back, less what has refilled since, only while it is the last: the bucket
// stands where the reservation left it, with nothing taken after it (or all
// of that given back already) and no admission made before it released
// since. It then also lifts the hold it put on releases (see Done), as if
// it had never been made: an admission made before it and released after
// gives its tokens back. Otherwise it gives nothing back: the reservations
// and admissions made after it were granted against its tokens, and handing
// these to a newcomer would let it share a later reservation's instant
// beyond the burst. Its tokens then stay taken and come back only by the
// refill, even when the later ones are cancelled in turn. A reservation
// made before a SetLimit gives nothing back. Cancelling twice
// does nothing.
func (r *reservation) cancelAt(now time.Duration) {
	if !r.ok || r.done {
		return
	}
	r.done = true
	c := r.cfg
	for {
		tat := c.tat.v.Load()
		if tat == tatFrozen || tat == emptyTAT {
			return
		}
		// Whatever was taken after this reservation and is still taken
		// holds the TAT above its own, and was granted against its tokens:
		// giving any of them back would hand them out twice, and lower the
		// TAT under the turn of a later waiting reservation. A TAT below
		// its own (an earlier admission released since, possible only when
		// the reservation did not wait) leaves no exact account: give
		// nothing. A waiting reservation after this one holds the edge at
		// its own TAT, so releases cannot bring the TAT back down to this
		// one's while it waits. What has refilled by now is not owed any
		// more.
		if tat != r.tat {
			return
		}
		refund := min(r.n*c.iv, r.tat-int64(now))
		if refund <= 0 {
			return
		}
		if r.raised {
			// The reservation is the last, and the edge at its TAT is its
			// own: the edge goes back to where the reservation found it, as
			// if it had never been made. (Lowered only to there, and only
			// while nobody raised it further since.) It goes back before the
			// TAT moves: a reservation made in between then finds the edge
			// below its turn and raises it, rather than find it at this
			// one's turn and lose it to this line.
			r.raised = false
			c.edge.CompareAndSwap(r.tat, r.edge)
		}
		if c.tat.v.CompareAndSwap(tat, tat-refund) {
			return
		}
	}
}

// reserve takes n tokens at now when they are there within maxDelay, and
// returns the reservation, or, when it is not granted, the delay that was
// needed (0 when n exceeds the burst).
func (tb *TokenBucket) reserve(now, n, maxDelay int64) (reservation, int64) {
	for {
		c := tb.cfg.Load()
		if n > c.burst {
			return reservation{}, 0
		}
		tat := c.tat.v.Load()
		if tat == tatFrozen {
			runtime.Gosched()
			continue
		}
		base := max(tat, now)
		if base-now > maxTolerance-n*c.iv {
			// Reservations pile up debt without bound; kept within 2^62ns
			// of now, the TAT never overflows. The tokens come when the
			// debt less the burst has passed (no sum here passes 2^62).
			return reservation{}, max(base-now-c.tau+n*c.iv, 0)
		}
		next := base + n*c.iv
		act := max(next-c.tau, now)
		if act-now > maxDelay {
			return reservation{}, act - now
		}
		var prevEdge int64
		raised := false
		if act > now {
			// Raised before the TAT moves, so that no release slips below
			// this turn in between. A failed CAS leaves it high: releases
			// then give back less, never more.
			for {
				e := c.edge.Load()
				if e >= next {
					break
				}
				if c.edge.CompareAndSwap(e, next) {
					prevEdge, raised = e, true
					break
				}
			}
		}
		if !c.tat.v.CompareAndSwap(tat, next) {
			continue
		}
		return reservation{tb: tb, cfg: c, n: n, tat: next, act: act, edge: prevEdge, raised: raised, ok: true}, 0
	}
}

// Wait waits for one token; shorthand for WaitN(ctx, 1).
func (tb *TokenBucket) Wait(ctx context.Context) error { return tb.WaitN(ctx, 1) }

// WaitN waits until n tokens (below 1 counts as 1) are there and takes them.
// It returns at once a sluice rejection matching ErrNeverSatisfiable
// when n exceeds the burst, and one matching ErrWouldExceedDeadline when the
// tokens would come after ctx's deadline (or, without one, when taking them
// would leave the bucket whole again only more than 2^62ns after now, its
// bound on debt); in both cases it takes nothing, and the rejection's
// RetryAfter is when the tokens would come. When ctx ends during the
// wait, it cancels its reservation, and returns ctx.Err(): the tokens come
// back only when nothing was taken after them (the waiter was the last),
// and never when SetLimit ran during the wait. Tokens due exactly at the
// deadline are taken, and WaitN returns nil. It waits with a timer, so inside a testing/synctest bubble it
// follows the bubble's time (give the bucket a clock made in the bubble).
func (tb *TokenBucket) WaitN(ctx context.Context, n int64) error {
	n = max(n, 1)
	if err := ctx.Err(); err != nil {
		return err
	}
	// Under a deadline, one instant for its room and the wait's start, so
	// that tokens the room admits are not given up by the wait.
	var start time.Time
	now := int64(tb.now())
	maxDelay := int64(math.MaxInt64)
	if dl, ok := ctx.Deadline(); ok {
		start = time.Now()
		maxDelay = int64(dl.Sub(start))
	}
	r, need := tb.reserve(now, n, maxDelay)
	if !r.ok {
		c, base := tb.state(now)
		remaining, reset := floorDiv(now+c.tau-base, c.iv), time.Duration(base-now)
		if n > c.burst {
			return sluice.Rejection(never(tb.name, c.burst, remaining, reset))
		}
		d := reject(tb.name, c.burst, remaining, reset, time.Duration(need))
		d.Cause = ErrWouldExceedDeadline
		return sluice.Rejection(d)
	}
	delay := r.act - now
	if delay <= 0 {
		return nil
	}
	if start.IsZero() {
		start = time.Now()
	}
	timer := time.NewTimer(time.Duration(delay))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		// The timer's own clock says whether the tokens came as ctx ended
		// (Stop cannot: it stops a timer whose value was not received).
		if time.Since(start) >= time.Duration(delay) {
			return nil // they are taken
		}
		r.cancelAt(tb.now())
		return ctx.Err()
	}
}

// SetLimit changes the refill rate and the capacity now, by the bucket's
// clock, validated as NewTokenBucket validates them: on an error nothing
// changes. The bucket keeps what it lacks: the tokens missing from a full
// bucket stay missing (rescaled to the new rate, rounded towards fewer
// tokens), so a full bucket is full at its new size and one that lacked 3
// tokens still lacks 3; reservations already granted keep their instants.
// Safe while requests are decided.
func (tb *TokenBucket) SetLimit(r Rate, burst int64) error {
	return setBucket(&tb.cfg, &tb.mu, "token bucket", r, burst, int64(tb.now()))
}

// keepTAT, as setBucket's instant, keeps the theoretical arrival time as
// it is instead of converting what the bucket lacks to the new rate.
const keepTAT = math.MinInt64

// setBucket moves the bucket configuration held by cfg to rate r and burst
// at now, under mu; see TokenBucket.SetLimit. With now keepTAT, the TAT
// stays as it is (see GCRA.SetLimit).
func setBucket(cfg *atomic.Pointer[bucketConfig], mu *sync.Mutex, what string, r Rate, burst, now int64) error {
	defer policywindow.Changed() // once the new window is in place
	iv, tau, err := tolerance(what, r, burst)
	if err != nil {
		return err
	}
	c := &bucketConfig{iv: iv, tau: tau, burst: burst, rate: r}
	mu.Lock()
	defer mu.Unlock()
	moveTo(cfg, cfg.Load(), c, now)
	return nil
}

// moveTo freezes old's state word, converts its TAT to c's interval at now,
// and publishes c. Decisions that see the frozen word reload the
// configuration; they spin only for the few instructions between the freeze
// and the publication.
func moveTo(cfg *atomic.Pointer[bucketConfig], old, c *bucketConfig, now int64) {
	tat := old.tat.v.Swap(tatFrozen)
	if now == keepTAT {
		c.since = old.since
		if tat != emptyTAT && c.iv != old.iv {
			// At another interval a release would give back other time:
			// every admission so far came before the TAT, and its
			// release, cut for the old numbers, gives nothing back. At the
			// same interval it gives back what it took.
			c.since = tat
		}
		c.tat.v.Store(tat)
		c.edge.Store(old.edge.Load())
	} else {
		c.tat.v.Store(convertTAT(tat, now, old.iv, c.iv))
		c.edge.Store(convertTAT(old.edge.Load(), now, old.iv, c.iv))
		c.at, c.prevIv, c.prevAt = now, old.iv, old.at
	}
	cfg.Store(c)
}

// convertTAT rescales the debt tat - now from interval from to interval to,
// rounding up so that the bucket never gains a token by the change.
func convertTAT(tat, now, from, to int64) int64 {
	if tat <= now || from == to {
		return tat
	}
	hi, lo := bits.Mul64(uint64(tat-now), uint64(to))
	if hi >= uint64(from) {
		return maxTolerance + now
	}
	q, rem := bits.Div64(hi, lo, uint64(from))
	if rem != 0 {
		q++
	}
	if q > uint64(maxTolerance) {
		q = uint64(maxTolerance)
	}
	return now + int64(q)
}

// rateWindow returns the time the bucket takes to refill its whole burst, burst
// × interval at the current rate: the w of the RateLimit-Policy header field.
func (b *TokenBucket) rateWindow() time.Duration { return time.Duration(b.cfg.Load().tau) }
