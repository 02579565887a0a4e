package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/eventsource"
)

// failurePolicy is what a limiter does when Redis cannot decide: it is
// unreachable, too slow (past the limiter's timeout), or the breaker around it
// is open. It is set by one of WithFailOpen (the default), WithFailClosed and
// WithLocalFallback.
type failurePolicy uint8

const (
	failOpen failurePolicy = iota
	failClosed
	failLocal
)

// ErrUnavailable is the cause of a failClosed rejection: Redis could not
// decide. It wraps sluice.ErrCircuitOpen, so adapters answer 503, not 429.
var ErrUnavailable = fmt.Errorf("%w: redis limiter unavailable", sluice.ErrCircuitOpen)

// ErrCrossSlot is reported to the observer when the limits combined by All
// would be stored in different Redis Cluster slots for one request; the
// request is then decided by the failure policies.
var ErrCrossSlot = errors.New("redislimit: the combined limits' keys hash to different cluster slots")

// defaultTimeout is the time a decision waits for Redis before the failure
// policy decides instead.
const defaultTimeout = 50 * time.Millisecond

// defaultPrefix is the first part of every key the limiters write.
const defaultPrefix = "sluice"

// Option configures a limiter built by NewGCRA, NewTokenBucket,
// NewFixedWindow, NewSlidingWindow, NewSlidingWindowWeighted or All.
type Option func(*config) error

type config struct {
	name          string
	prefix        string
	keyFunc       func(context.Context) string
	perResource   bool
	failure       failurePolicy
	instances     int64
	timeout       time.Duration
	failures      int
	openFor       time.Duration
	observer      func(Event)
	negCache      int
	memberOnly    []string // options set that All does not take
	failureSet    string   // the option that set the failure policy, if one did
	observerSet   bool
	breakerSet    bool
	timeoutSet    bool
	localCapacity int
	noCoalescing  bool
}

func defaultConfig(algorithm string) config {
	return config{
		name:          "ratelimit/redis/" + algorithm,
		prefix:        defaultPrefix,
		keyFunc:       keyFromContext,
		failure:       failOpen,
		instances:     1,
		timeout:       defaultTimeout,
		failures:      defaultBreakerFailures,
		openFor:       defaultBreakerOpen,
		localCapacity: 65536,
	}
}

func keyFromContext(ctx context.Context) string {
	k, _ := sluice.KeyFrom(ctx)
	return k
}

func (c *config) apply(opts []Option) error {
	for i, o := range opts {
		if o == nil {
			return fmt.Errorf("redislimit: option %d is nil", i)
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// WithName sets the limiter's name, reported in its decisions and part of its
// Redis keys; the default is "ratelimit/redis/" and the algorithm
// ("ratelimit/redis/gcra"). Two limiters sharing a Redis must have different
// names unless they are meant to share their state. The name must not
// contain '{' or '}'; in the keys, its '%' and ':' are written "%25" and
// "%3A", so a name never runs into the prefix.
func WithName(name string) Option {
	return func(c *config) error {
		if name == "" {
			return errors.New("redislimit: WithName: empty name")
		}
		if strings.ContainsAny(name, "{}") {
			return fmt.Errorf("redislimit: WithName(%q): a name must not contain '{' or '}'", name)
		}
		if !utf8.ValidString(name) {
			return fmt.Errorf("redislimit: WithName(%q): not valid UTF-8", name)
		}
		c.name = name
		return nil
	}
}

// WithPrefix sets the first part of the limiter's keys; the default is
// "sluice". It must not contain '{' or '}'.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if prefix == "" || strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("redislimit: WithPrefix(%q): want a non-empty prefix without '{' or '}'", prefix)
		}
		c.prefix = prefix
		c.memberOnly = append(c.memberOnly, "WithPrefix")
		return nil
	}
}

// WithKeyFunc sets how a request's key (a user, a client IP) is read from its
// context; the default is sluice.KeyFrom, and a request without a key shares
// the one key "". The key is hashed before it becomes part of a Redis key.
func WithKeyFunc(fn func(ctx context.Context) string) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("redislimit: WithKeyFunc: nil function")
		}
		c.keyFunc = fn
		c.memberOnly = append(c.memberOnly, "WithKeyFunc")
		return nil
	}
}

// WithPerResource makes the limit count per key and resource (sluice.ResourceFrom:
// a route, a method) instead of per key alone. The resource's hash is placed
// outside the key's hash tag, so the limit still shares its Cluster slot with
// the key's other limits.
func WithPerResource() Option {
	return func(c *config) error {
		c.perResource = true
		c.memberOnly = append(c.memberOnly, "WithPerResource")
		return nil
	}
}

// setFailure sets the failure policy f by the option named by, which must be
// the only one: two failure policies, or one given twice, are an error.
func (c *config) setFailure(f failurePolicy, by string) error {
	if c.failureSet != "" {
		return fmt.Errorf("redislimit: %s: the failure policy is set already, by %s: give one of WithFailOpen, WithFailClosed and WithLocalFallback, once", by, c.failureSet)
	}
	c.failure, c.failureSet = f, by
	c.memberOnly = append(c.memberOnly, by)
	return nil
}

// WithFailOpen makes the limiter admit every request while Redis cannot
// decide. It is the default. Its decisions then have Limit -1 and Remaining
// 0, and, as the observer's EventFallback carries them, name the policy with
// the suffix ":open". It excludes WithFailClosed and WithLocalFallback.
func WithFailOpen() Option {
	return func(c *config) error { return c.setFailure(failOpen, "WithFailOpen") }
}

// WithFailClosed makes the limiter reject every request while Redis cannot
// decide, with a cause wrapping ErrUnavailable (and so sluice.ErrCircuitOpen:
// HTTP 503); the observer's EventFallback names the policy with the suffix
// ":closed". It excludes WithFailOpen and WithLocalFallback.
func WithFailClosed() Option {
	return func(c *config) error { return c.setFailure(failClosed, "WithFailClosed") }
}

// WithLocalFallback makes the limiter decide locally while Redis cannot, with
// this instance's share of the limit: the rate, burst or window limit divided
// by instances, the number of instances expected to share the limit (at least
// 1 unit each), with a local limiter of the same algorithm per key, named
// with the suffix ":local" in the observer's events. At most 65536 keys are
// tracked locally; beyond that an arbitrary key's local state is dropped. It
// excludes WithFailOpen and WithFailClosed.
func WithLocalFallback(instances int) Option {
	return func(c *config) error {
		if instances < 1 {
			return fmt.Errorf("redislimit: WithLocalFallback(%d): want at least 1 instance", instances)
		}
		c.instances = int64(instances)
		return c.setFailure(failLocal, "WithLocalFallback")
	}
}

// WithTimeout sets how long one decision waits for Redis before its failure
// policy decides instead; the default is 50 ms. It replaces
// the request context's own deadline and cancellation for that call: a
// decision is owed either way. Calls starting within timeout/16 of each other
// share one deadline, so a call's deadline is between 15/16 of the timeout and
// the timeout.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("redislimit: WithTimeout(%v): want a positive duration", d)
		}
		c.timeout = d
		c.timeoutSet = true
		return nil
	}
}

// defaultBreakerFailures is the number of consecutive Redis failures that
// open the breaker around Redis.
const defaultBreakerFailures = 5

// maxBreakerFailures bounds WithBreaker's failures: the breaker keeps the
// last failures outcomes (a run of failures past a thousand is no breaker).
const maxBreakerFailures = 1024

// defaultBreakerOpen is how long the breaker around Redis stays open before
// one half-open probe tries Redis again.
const defaultBreakerOpen = time.Second

// WithBreaker sets the breaker around Redis: it opens after failures
// consecutive failed calls (default 5; at most 1024); while open,
// decisions go to the failure policy without touching Redis; after openFor
// (default 1 s) one request probes Redis, and its success closes the
// breaker.
func WithBreaker(failures int, openFor time.Duration) Option {
	return func(c *config) error {
		if failures < 1 || failures > maxBreakerFailures || openFor <= 0 {
			return fmt.Errorf("redislimit: WithBreaker(%d, %v): want failures in [1, %d] and a positive open time", failures, openFor, maxBreakerFailures)
		}
		c.failures = failures
		c.openFor = openFor
		c.breakerSet = true
		return nil
	}
}

// WithObserver registers fn, called for every decision the failure policy
// made instead of Redis, every failed Redis call and every change of the
// breaker's state. It runs on the request's goroutine, outside every lock;
// keep it short. The default is none. A limiter has one observer: a second
// WithObserver is an error, not a replacement of the first.
func WithObserver(fn func(Event)) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("redislimit: WithObserver: nil function")
		}
		if c.observerSet {
			return errors.New("redislimit: WithObserver given twice: a limiter has one observer; fan out in the function")
		}
		c.observer, c.observerSet = fn, true
		return nil
	}
}

// WithoutCoalescing makes every admission its own call to Redis. By default
// a key has at most 8 calls in flight: the admissions of the key that arrive
// while it has 8 wait for one of them to return, then go to Redis together,
// up to 64 in one call of the algorithm's batch script, which decides them
// in turn as that many calls of their own would at that instant. A hot key
// then costs one round trip, and one script run, per batch instead of per
// request; a request that finds fewer than 8 calls in flight for its key
// goes to Redis at once, as without coalescing. Each request still waits
// at most its timeout, and the breaker around Redis (WithBreaker) counts a
// batch's call as one call. Limiters built by All of several limits, whose
// requests are decided in one call already, never coalesce; one built by All
// of a single limit decides as that limit alone, coalescing unless All is
// given WithoutCoalescing.
func WithoutCoalescing() Option {
	return func(c *config) error {
		c.noCoalescing = true
		return nil
	}
}

// WithNegativeCache makes the limiter remember, for up to maxKeys keys, a
// rejection's RetryAfter and reject the key locally, without a round trip to
// Redis, until it has passed. Only rejections of a request of cost 1 are
// kept: their RetryAfter holds for every cost, where a costly request's
// would turn away cheaper ones that fit. A request this limiter admitted
// and that is given back (Released) forgets the key's rejection. The
// default is no cache. Requests rejected locally are not seen by Redis, so
// they never extend the wait.
func WithNegativeCache(maxKeys int) Option {
	return func(c *config) error {
		if maxKeys < 1 {
			return fmt.Errorf("redislimit: WithNegativeCache(%d): want at least 1 key", maxKeys)
		}
		c.negCache = maxKeys
		return nil
	}
}

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventFallback: a decision was made by the failure policy, not Redis.
	EventFallback EventKind = iota
	// EventRedisError: a call to Redis failed or timed out.
	EventRedisError
	// EventStateChange: the breaker around Redis changed state.
	EventStateChange
)

// String returns "fallback", "redis-error" or "state-change".
func (k EventKind) String() string {
	switch k {
	case EventFallback:
		return "fallback"
	case EventRedisError:
		return "redis-error"
	case EventStateChange:
		return "state-change"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is what an observer hears.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// Policy is the limiter's name.
	Policy string
	// At is the monotonic instant of the decision.
	At time.Duration
	// Decision is the failure policy's decision (EventFallback).
	Decision sluice.Decision
	// Err is Redis's error (EventRedisError).
	Err error
	// From and To are the breaker's states: "closed", "open", "half-open"
	// (EventStateChange).
	From, To string
	// src is the limiter that sent the event, for the dashboard's
	// observer (internal/eventsource): limiters may share a name.
	src *Limiter
}

func init() {
	eventsource.Of = func(e any) any {
		if ev, ok := e.(Event); ok && ev.src != nil {
			return ev.src
		}
		return nil
	}
}
