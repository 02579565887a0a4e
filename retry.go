package sluice

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Retry declares the retries of a Guard's calls ([WithRetry]). Its zero
// value takes every default.
//
// Each attempt is a call of its own through the Guard's policies (one call
// for a breaker). A call is tried again only when its attempt failed (the
// Guard's Classifier says Failure; adapters say which statuses and codes),
// its caller's context has not ended, attempts are left, the delay ends
// before the context's deadline, and the Guard's retry budget has one to
// spare. A rejection by the Guard's own policies, an open breaker's
// included, is never tried again.
type Retry struct {
	// Attempts is the most attempts a call makes, the first included.
	// Default 3; at least 2.
	Attempts int
	// Backoff bounds the delay before the first retry; each later bound is
	// twice the one before, up to MaxBackoff. The delay is drawn at random
	// between 0 and the bound (full jitter), and added to what the peer
	// asked for (Retry-After, RetryInfo, grpc-retry-pushback-ms), so that
	// the clients it told one instant do not all come back at it.
	// Default 50ms.
	Backoff time.Duration
	// MaxBackoff caps the bound; a peer that asks for a longer delay gets
	// its failure returned at once. Default 2s, or Backoff if longer; at
	// least Backoff.
	MaxBackoff time.Duration
	// Budget is the share of the Guard's calls that retries may add: 0.1
	// lets 10 calls in 100 be retried once. Default 0.1; at most 1.
	Budget float64
	// MinPerSecond is how many retries a second the budget allows however
	// few the calls: a floor for a client that calls rarely. Kept low, since
	// every process of a fleet has its own. Unspent budget is saved up to
	// Budget's share of the calls of about the last second, 10 retries, or
	// one second of the floor, whichever is most. Default 1.
	MinPerSecond float64
}

// WithRetry makes the Guard retry the calls of [Guard.Do] and [Execute]
// that fail, as r declares, each retry a fresh admission by every policy;
// the sluicehttp Transport and the sluicegrpc client interceptors retry
// the same way with the Guard of each target. The Guard keeps one retry
// budget for all its calls: give a Guard to each dependency. Its fallbacks
// ([WithFallback]) stay outermost: they answer the last attempt's error.
// The default is no retries.
func WithRetry(r Retry) Option {
	return func(g *Guard) error {
		b, err := newRetrier(r)
		if err != nil {
			return err
		}
		g.retry = b
		return nil
	}
}

// retrier is a Guard's retry declaration and budget.
type retrier struct {
	attempts      int
	backoff, ceil time.Duration
	ratio         float64
	floor         float64 // retries a second
	cap           float64 // the most the budget saves

	calls    [statShards]paddedCounter // every Begin: attempts, retries included
	retries  atomic.Uint64             // retries granted
	refusals atomic.Uint64             // retries the budget refused

	mu        sync.Mutex
	balance   float64   // retries the budget has to give
	recent    float64   // calls less retries of about the last recentWindow, decayed
	lastCalls uint64    // calls less retries, as of the last update
	lastAt    time.Time // the instant of the last update, or the Guard's making
}

type paddedCounter struct {
	n atomic.Uint64
	_ [56]byte
}

func newRetrier(r Retry) (*retrier, error) {
	b := &retrier{attempts: 3, backoff: 50 * time.Millisecond, ceil: 2 * time.Second, ratio: 0.1, floor: 1}
	switch {
	case r.Attempts < 0 || r.Attempts == 1:
		return nil, errors.New("sluice: WithRetry: Attempts " + itoa(int64(r.Attempts)) + ": want at least 2 (0: the default, 3)")
	case r.Backoff < 0:
		return nil, errors.New("sluice: WithRetry: Backoff " + r.Backoff.String() + " is negative")
	case r.MaxBackoff < 0:
		return nil, errors.New("sluice: WithRetry: MaxBackoff " + r.MaxBackoff.String() + " is negative")
	case r.Budget < 0 || r.Budget > 1 || math.IsNaN(r.Budget):
		return nil, errors.New("sluice: WithRetry: Budget must be between 0 and 1 (0: the default, 0.1)")
	case r.MinPerSecond < 0 || math.IsNaN(r.MinPerSecond) || math.IsInf(r.MinPerSecond, 0):
		return nil, errors.New("sluice: WithRetry: MinPerSecond must be a positive number (0: the default, 1)")
	}
	if r.Attempts > 0 {
		b.attempts = r.Attempts
	}
	if r.Backoff > 0 {
		b.backoff = r.Backoff
	}
	if r.MaxBackoff > 0 {
		b.ceil = r.MaxBackoff
	} else {
		b.ceil = max(b.ceil, b.backoff) // the default fits the Backoff given
	}
	if b.ceil < b.backoff {
		return nil, errors.New("sluice: WithRetry: MaxBackoff " + b.ceil.String() + " is below Backoff " + b.backoff.String())
	}
	if r.Budget > 0 {
		b.ratio = r.Budget
	}
	if r.MinPerSecond > 0 {
		b.floor = r.MinPerSecond
	}
	b.cap = max(10, b.floor)
	b.balance = min(b.floor, b.cap) // a first failure finds one second of the floor
	// The budget saves from the start: the calls and the time before the
	// first retry count as any later ones do.
	b.lastAt = time.Now()
	return b, nil
}

// began counts an attempt; small enough to inline.
func (b *retrier) began() { b.calls[shard()].n.Add(1) }

func (b *retrier) attemptsMade() uint64 {
	var n uint64
	for i := range b.calls {
		n += b.calls[i].n.Load()
	}
	return n
}

// recentWindow is the span of calls whose share the budget saves: a
// burst of calls failing together may have their share of retries,
// however many, but the calls of the health before a storm buy it at most
// one second's share on top of its own.
const recentWindow = time.Second

// withdraw takes one retry from the budget at now, and reports whether it
// had one. The budget grows by ratio for each call (attempts less retries)
// and by floor a second, up to the most of cap and ratio times the calls
// of about the last recentWindow. Its time is the time package's, as the
// backoff's and the deadline's are (testing/synctest fakes it).
func (b *retrier) withdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	calls := b.attemptsMade() - b.retries.Load()
	var fresh float64 // calls since the last update
	if calls > b.lastCalls {
		fresh = float64(calls - b.lastCalls)
	}
	var dt float64 // seconds since the last update
	if now.After(b.lastAt) {
		dt = now.Sub(b.lastAt).Seconds()
		b.lastAt = now
	}
	// The calls since the last update are taken as spread evenly over
	// its span, and counted into an exponential average over recentWindow:
	// all of a burst counts, a tenth of an idle hour's calls hardly.
	x := dt / recentWindow.Seconds()
	spread := 1.0
	if x > 1e-9 {
		spread = -math.Expm1(-x) / x
	}
	b.recent = b.recent*math.Exp(-x) + fresh*spread
	b.balance += b.ratio*fresh + b.floor*dt
	b.lastCalls = max(calls, b.lastCalls)
	b.balance = min(b.balance, max(b.cap, b.ratio*b.recent))
	if b.balance < 1 {
		b.refusals.Add(1)
		return false
	}
	b.balance--
	b.retries.Add(1)
	return true
}

// delay draws the delay before the retry after attempt n (1: the first
// attempt): full jitter under a bound that doubles from backoff up to ceil.
func (b *retrier) delay(n int) time.Duration {
	bound := b.backoff
	for i := 1; i < n && bound < b.ceil; i++ {
		if bound > b.ceil/2 {
			bound = b.ceil // and no doubling past the largest Duration
			break
		}
		bound *= 2
	}
	if bound == math.MaxInt64 {
		return rand.N(bound)
	}
	return rand.N(bound + 1)
}

// retryDelay decides whether a call of g may be tried again; [Guard.Do]
// and [Execute] ask it themselves, adapters that run their own attempts ask
// it through internal/guardhook.RetryDelay, whose doc says what it answers.
func (g *Guard) retryDelay(ctx context.Context, attempts int, began time.Time, atLeast time.Duration) (time.Duration, bool) {
	if g == nil || g.retry == nil {
		return 0, false
	}
	if attempts == 0 {
		return 0, true
	}
	if ctx == nil || ctx.Err() != nil {
		return 0, false
	}
	b := g.retry
	if attempts < 1 || attempts >= b.attempts || atLeast > b.ceil {
		return 0, false
	}
	d := atLeast + min(b.delay(attempts), math.MaxInt64-atLeast)
	if dl, ok := ctx.Deadline(); ok {
		var took time.Duration
		if !began.IsZero() {
			took = max(time.Since(began), 0)
		}
		if time.Until(dl)-took <= d { // d may be near the largest Duration
			return 0, false // the next attempt could not end in time
		}
	}
	if !b.withdraw(time.Now()) {
		return 0, false
	}
	return d, true
}

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// retried runs fn under g as Execute does without the fallbacks, trying
// a failed call again as g's Retry declares: it returns the last attempt's
// value and error.
func retried[T any](ctx context.Context, g *Guard, fn func(context.Context) (T, error)) (T, error) {
	_, timed := ctx.Deadline()
	for n := 1; ; n++ {
		var began time.Time
		if timed {
			began = time.Now() // how long an attempt takes, for the deadline
		}
		v, ran, err := attempt(ctx, g, fn)
		if err == nil || !ran || ctx.Err() != nil || g.classify(err) != Failure {
			return v, err
		}
		d, ok := g.retryDelay(ctx, n, began, 0)
		if !ok || !sleep(ctx, d) {
			return v, err
		}
	}
}

// attempt is one attempt of retried: the call's value and error, and
// whether the Guard's policies admitted it.
func attempt[T any](ctx context.Context, g *Guard, fn func(context.Context) (T, error)) (v T, ran bool, err error) {
	c := Call{g: g, parent: ctx}
	defer c.endOnPanic()
	if err := g.begin(ctx, &c, false); err != nil {
		return v, false, err
	}
	v, err = fn(c.Context())
	return v, true, c.finish(err)
}
