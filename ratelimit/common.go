package ratelimit

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
)

// ErrNeverSatisfiable is the cause of a rejection for a request whose cost is
// larger than the limiter could ever grant at once (n > burst, n > the
// window's limit). It wraps sluice.ErrRateLimited, so adapters answer 429, but
// waiting would never help: WaitN returns it at once instead of waiting.
var ErrNeverSatisfiable = fmt.Errorf("%w: the request's cost exceeds the limiter's capacity and can never be satisfied", sluice.ErrRateLimited)

// Option configures any limiter of this package.
type Option func(*options) error

type options struct {
	name  string
	clock sluice.Clock
}

// WithName sets the name the limiter reports in its decisions, errors and
// headers; the default is "ratelimit/" followed by the algorithm's name
// ("ratelimit/token-bucket").
func WithName(name string) Option {
	return func(o *options) error {
		if name == "" {
			return errors.New("ratelimit: WithName: empty name")
		}
		o.name = name
		return nil
	}
}

// WithClock sets the clock read by the limiter's methods that take no
// instant (Allow, Reserve, Wait); the default is sluice.SystemClock. Inside a
// Guard, the Guard's clock is used and this one is not read.
func WithClock(c sluice.Clock) Option {
	return func(o *options) error {
		if c == nil {
			return errors.New("ratelimit: WithClock: nil clock")
		}
		o.clock = c
		return nil
	}
}

func buildOptions(algorithm string, opts []Option) (options, error) {
	o := options{name: "ratelimit/" + algorithm, clock: sluice.SystemClock}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// allow builds the Decision of an admitted request.
func allow(name string, limit, remaining int64, reset time.Duration) sluice.Decision {
	if remaining < 0 {
		remaining = 0
	}
	if reset < 0 {
		reset = 0
	}
	return sluice.Decision{Allowed: true, Policy: name, Limit: limit, Remaining: remaining, Reset: reset}
}

// reject builds the Decision of a rate-limited request. retryAfter is raised
// to at least 1ns so a rejection always says when to retry.
func reject(name string, limit, remaining int64, reset, retryAfter time.Duration) sluice.Decision {
	if remaining < 0 {
		remaining = 0
	}
	if reset < 0 {
		reset = 0
	}
	if retryAfter <= 0 {
		retryAfter = 1
	}
	return sluice.Decision{Policy: name, Limit: limit, Remaining: remaining, Reset: reset,
		RetryAfter: retryAfter, Cause: sluice.ErrRateLimited}
}

// never builds the Decision of a request that no wait can satisfy.
func never(name string, limit, remaining int64, reset time.Duration) sluice.Decision {
	d := reject(name, limit, remaining, reset, 0)
	d.RetryAfter = 0
	d.Cause = ErrNeverSatisfiable
	return d
}
