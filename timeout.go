package sluice

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-go/sluice/internal/timeouterr"
)

// WithTimeout gives every call that the Guard runs with [Guard.Do],
// [Execute] or [Guard.Begin] a deadline d after it was admitted: the call's context is
// cancelled when d passes, and if the call then returns an error that the
// Guard's Classifier counts as a Failure, the caller gets an error that
// matches both ErrTimeout and context.DeadlineExceeded, unwraps to the
// call's error, and reports Timeout() true; another (a not-found the
// Classifier ignores) stands as it is, as the adapters send a 4xx answered
// past the deadline. The Guard's policies count it as the Guard's
// Classifier says (DefaultClassifier: a Failure, so breakers count it), and
// its fallbacks can catch it by cause ([CauseTimeout]).
//
// A call that returns nil after the deadline has done its work: its result
// stands. The call must honour its context; the Guard does not abandon it.
//
// A caller's own deadline that comes no later than d is kept as it is: the
// call runs with the caller's context, and an expiry then is the caller's
// (context.DeadlineExceeded, not ErrTimeout). Time spent waiting in the
// policies' Admit is bounded by the caller's context, not by d. The deadline
// is on the wall clock of the time package, which testing/synctest fakes.
// While the whole Guard is in shadow mode (see [Guard.SetShadow]) it sets
// no deadline: it cuts no call short.
//
// The default is no timeout. d must be positive.
func WithTimeout(d time.Duration) Option {
	return func(g *Guard) error {
		if d <= 0 {
			return errors.New("sluice: WithTimeout: timeout " + d.String() + " is not positive")
		}
		g.timeout = d
		return nil
	}
}

// callContext returns ctx with the Guard's deadline and its cancel function,
// or ctx and nil when ctx's own deadline comes no later.
func (g *Guard) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	own := time.Now().Add(g.timeout)
	if dl, ok := ctx.Deadline(); ok && !dl.After(own) {
		return ctx, nil
	}
	return context.WithDeadlineCause(ctx, own, ErrTimeout)
}

// timedOut turns err into a *timeouterr.Error when the Guard's deadline on cctx
// passed: cctx's expiry with the cause callContext gives it. A caller's own
// deadline that came first (cctx is then the caller's context) is the
// caller's.
func (g *Guard) timedOut(cctx context.Context, err error) error {
	if te, ok := err.(*timeouterr.Error); ok && te.After == g.timeout {
		return err // mapped already
	}
	if err != nil && cctx.Err() == context.DeadlineExceeded && context.Cause(cctx) == ErrTimeout {
		return &timeouterr.Error{After: g.timeout, Err: err}
	}
	return err
}
