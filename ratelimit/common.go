package ratelimit

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/isnil"
	"github.com/sluice-go/sluice/internal/policywindow"
)

func init() {
	// The adapters read a limiter's window for the RateLimit-Policy header
	// field through package policywindow.
	policywindow.Register(func(p any) time.Duration {
		if w, ok := p.(interface{ rateWindow() time.Duration }); ok {
			return w.rateWindow()
		}
		return 0
	})
}

// ErrNeverSatisfiable is the cause of a rejection for a request whose cost is
// larger than the limiter could ever grant at once (n > burst, n > the
// window's limit). It wraps sluice.ErrRateLimited, so adapters answer 429, but
// waiting would never help: a Shaper, or TokenBucket.WaitN, returns it at once
// instead of waiting.
var ErrNeverSatisfiable = fmt.Errorf("%w: the request's cost exceeds the limiter's capacity and can never be satisfied", sluice.ErrRateLimited)

// Option configures a limiter of this package, or a Keyed. WithName applies
// to every constructor; WithClock to NewTokenBucket and NewKeyed, the two
// that read a clock of their own; WithMaxKeys, WithIdleTTL, WithJanitor and
// RequireKey to NewKeyed only. A constructor given an option that does not
// apply to it returns an error.
type Option func(*options) error

type options struct {
	name     string
	clock    sluice.Clock
	clockSet bool // WithClock was given
	// Keyed only.
	maxKeys    int
	idleTTL    time.Duration
	janitor    time.Duration
	requireKey bool
	keyedOnly  string // the first Keyed-only option given, for the error of another constructor
}

// WithName sets the name the limiter reports in its decisions, errors and
// headers; the default is "ratelimit/" followed by the algorithm's name
// ("ratelimit/token-bucket", "ratelimit/keyed").
func WithName(name string) Option {
	return func(o *options) error {
		if name == "" {
			return errors.New("ratelimit: WithName: empty name")
		}
		o.name = name
		return nil
	}
}

// WithClock sets the clock a TokenBucket reads in its methods that take no
// instant (Allow, Wait, Tokens, SetLimit...), or a Keyed's janitor reads; the
// default is sluice.SystemClock. The other limiters read no clock: a Guard
// hands Admit its own instants (give the Guard and the limiter the same
// clock), and they decide only through it.
func WithClock(c sluice.Clock) Option {
	return func(o *options) error {
		if isnil.Of(c) {
			return errors.New("ratelimit: WithClock: nil clock")
		}
		o.clock, o.clockSet = c, true
		return nil
	}
}

// keyedOption marks o as given the Keyed-only option named name.
func (o *options) keyedOption(name string) {
	if o.keyedOnly == "" {
		o.keyedOnly = name
	}
}

func applyOptions(o *options, opts []Option) error {
	for i, opt := range opts {
		if opt == nil {
			return fmt.Errorf("ratelimit: option %d is nil", i)
		}
		if err := opt(o); err != nil {
			return err
		}
	}
	return nil
}

// buildOptions applies the options of a limiter of the given algorithm;
// readsClock tells whether it takes WithClock.
func buildOptions(algorithm string, readsClock bool, opts []Option) (options, error) {
	o := options{name: "ratelimit/" + algorithm, clock: sluice.SystemClock}
	if err := applyOptions(&o, opts); err != nil {
		return o, err
	}
	if o.keyedOnly != "" {
		return o, fmt.Errorf("ratelimit: %s: %s applies to NewKeyed only", algorithm, o.keyedOnly)
	}
	if o.clockSet && !readsClock {
		return o, fmt.Errorf("ratelimit: %s: WithClock: this limiter reads no clock of its own; give the clock to the Guard (sluice.WithClock)", algorithm)
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

// Rate is Count events per Period: PerSecond(100), Every(50*time.Millisecond)
// (one event each interval), or, for any other period, a literal such as
// Rate{Count: 10, Period: time.Minute}. Its zero value is invalid;
// constructors reject it, as they reject a Count or Period of zero or less
// and more events per Period than it has nanoseconds.
type Rate struct {
	Count  int64
	Period time.Duration
}

// PerSecond returns a Rate of n per second.
func PerSecond(n int64) Rate { return Rate{Count: n, Period: time.Second} }

// Every returns a Rate of one event every interval.
func Every(interval time.Duration) Rate { return Rate{Count: 1, Period: interval} }

// String returns "100/1s".
func (r Rate) String() string { return fmt.Sprintf("%d/%v", r.Count, r.Period) }

// validate reports why r cannot be used: a Count or Period of zero or less,
// or more events per Period than it has nanoseconds.
func (r Rate) validate() error {
	switch {
	case r.Count <= 0:
		return fmt.Errorf("ratelimit: rate %v: count must be positive", r)
	case r.Period <= 0:
		return fmt.Errorf("ratelimit: rate %v: period must be positive", r)
	case int64(r.Period) < r.Count:
		return fmt.Errorf("ratelimit: rate %v: more than one event per nanosecond", r)
	}
	return nil
}
