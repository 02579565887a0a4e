package breaker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// Adaptive is client-side adaptive throttling, as described in Google's Site
// Reliability Engineering book ("Handling Overload"): over a rolling window
// it counts the requests it saw and those the dependency accepted
// (Success), and rejects each new request with probability
//
//	max(0, (requests − K·accepts) / (requests + 1))
//
// So while the dependency accepts most requests nothing is rejected; as it
// fails, the throttle sheds a growing share locally, yet always lets some
// through to notice the recovery, with no open or half-open state. Rejected
// requests count as requests, so sustained rejections keep the pressure on.
//
// Failures and rejections count as requests not accepted; Ignored and
// Released calls are not counted at all. Rejections match
// sluice.ErrCircuitOpen, with a RetryAfter of one bucket of the window, when
// the probability is next recomputed over a different span.
//
// An Adaptive is a sluice.Policy, safe for concurrent use; make one with
// NewAdaptive.
type Adaptive struct {
	name string
	cfg  atomic.Pointer[config] // k, minThrottle, random; replaced whole by Reconfigure
	env  permitEnv
	win  atomic.Pointer[timeWindow] // requests (total), accepts (lo)
	mu   sync.Mutex                 // serialises Reconfigure
}

// NewAdaptive returns an adaptive throttle named "breaker/" + name. The
// defaults are K = 2 and a window of 10s in 10 buckets; the options that
// apply are WithMultiplier, WithRollingWindow, WithRandom,
// WithMinThrottleRequests and WithClock.
func NewAdaptive(name string, opts ...Option) (*Adaptive, error) {
	if name == "" {
		return nil, errors.New("breaker: NewAdaptive: empty name")
	}
	cfg, err := buildConfig(forAdaptive, opts)
	if err != nil {
		return nil, err
	}
	a := &Adaptive{name: "breaker/" + name}
	a.cfg.Store(cfg)
	a.win.Store(newTimeWindow(cfg.length, cfg.buckets, true))
	a.env = newPermitEnv(cfg.clock)
	return a, nil
}

// Name returns "breaker/" followed by the name given to NewAdaptive.
func (a *Adaptive) Name() string { return a.name }

func (a *Adaptive) probability(c *config, t tally) float64 {
	if t.total < c.minThrottle || t.total <= 0 {
		return 0
	}
	p := (float64(t.total) - c.k*float64(max(t.lo, 0))) / float64(t.total+1)
	return max(p, 0)
}

// Admit decides on a request at the monotonic instant now. It is the
// sluice.Policy method.
func (a *Adaptive) Admit(_ context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if !a.admit(now) {
		return 0, sluice.Quota{Limit: -1, RetryAfter: a.win.Load().width}, sluice.ErrCircuitOpen
	}
	return 0, sluice.Quota{Limit: -1}, nil
}

// Needs returns sluice.NeedsEnd: the throttle counts each call in the
// window of the instant it ended.
func (a *Adaptive) Needs() sluice.Needs { return sluice.NeedsEnd }

// admit reports whether a request at now passes; a request it rejects counts
// as a request not accepted.
func (a *Adaptive) admit(now time.Duration) bool {
	w, c := a.win.Load(), a.cfg.Load()
	e := w.epoch(now)
	w.advance(e)
	if p := a.probability(c, w.read()); p > 0 && c.random() < p {
		w.add(e, 1, 0, 0)
		return false
	}
	return true
}

// Done counts an admitted request when it ends: a Success as a request the
// dependency accepted, a Failure as one it did not. Ignored and Released
// requests are not counted. It is the sluice.Policy method.
func (a *Adaptive) Done(_ sluice.Ticket, o sluice.Outcome, now, _ time.Duration) {
	w := a.win.Load()
	switch o {
	case sluice.Success:
		w.add(w.epoch(now), 1, 1, 0)
	case sluice.Failure:
		w.add(w.epoch(now), 1, 0, 0)
	}
}

var _ sluice.Policy = (*Adaptive)(nil)
