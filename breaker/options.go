package breaker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/isnil"
)

// Option configures a Breaker, an Adaptive throttle or a Group. Each option
// says which of them it applies to; a constructor given an option that does
// not apply to it, an option twice, or two options that would override each
// other, returns an error naming them.
type Option func(*config) error

// scope is the set of constructors an option applies to.
type scope uint8

const (
	forBreaker scope = 1 << iota
	forAdaptive
	forGroup
)

func (s scope) String() string {
	switch s {
	case forBreaker:
		return "breaker.New"
	case forAdaptive:
		return "breaker.NewAdaptive"
	}
	return "breaker.NewGroup"
}

type used struct {
	name  string
	scope scope
}

const (
	defaultConsecutive = 5
	defaultCountWindow = 100
	defaultOpen        = time.Second
	defaultK           = 2.0
	defaultWindow      = 10 * time.Second
	defaultBuckets     = 10
	maxCountWindow     = 1 << 24
	maxProbes          = 1 << 24        // counted exactly in a float64, as the ratio needs
	maxConsecutive     = math.MaxUint32 // a run is counted in 32 bits
	maxBuckets         = 1 << 16
	ppm                = 1_000_000
	defaultMaxGroup    = 1024
	maxGroup           = 1 << 24
)

type config struct {
	used []used

	// Trip strategies; zero means off.
	consecutive           int64
	errRatio, errRatioMin int64 // ratio in ppm
	errCount, errCountMin int64
	slowThreshold         time.Duration
	slowRatio, slowMin    int64 // ratio in ppm

	// Window: count > 0 for a count window, else a rolling time window.
	count   int
	length  time.Duration
	buckets int

	openBase, openMax time.Duration
	jitter            float64
	probes            int64
	probeRatio        float64
	need              int64 // probe successes that close the breaker

	clock sluice.Clock

	// Adaptive.
	k           float64
	random      func() float64
	minThrottle int64

	// Group.
	key         func(context.Context) string
	maxBreakers int
}

func (c *config) use(name string, s scope) { c.used = append(c.used, used{name, s}) }

func buildConfig(target scope, opts []Option) (*config, error) {
	c := &config{
		openBase:    defaultOpen,
		openMax:     defaultOpen,
		probes:      1,
		probeRatio:  1,
		clock:       sluice.SystemClock,
		k:           defaultK,
		random:      randFloat,
		key:         resourceKey,
		maxBreakers: defaultMaxGroup,
	}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("breaker: option %d is nil", i)
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	given := make(map[string]bool, len(c.used))
	for _, u := range c.used {
		if u.scope&target == 0 {
			return nil, fmt.Errorf("breaker: %s does not apply to %v", u.name, target)
		}
		if given[u.name] {
			return nil, fmt.Errorf("breaker: %s given twice: the last would silently replace the first", u.name)
		}
		given[u.name] = true
	}
	for _, pair := range [][2]string{{"WithCountWindow", "WithRollingWindow"}, {"WithOpenDuration", "WithBackoff"}} {
		if given[pair[0]] && given[pair[1]] {
			return nil, fmt.Errorf("breaker: %s and %s together: choose one, the last would silently replace the other", pair[0], pair[1])
		}
	}
	if target != forAdaptive && given["WithRandom"] && !given["WithJitter"] {
		return nil, errors.New("breaker: WithRandom without WithJitter: a breaker draws random numbers only for the jitter")
	}
	// The tolerance keeps a ratio like 2/3 of 3 probes at 2, not 3.
	c.need = max(int64(math.Ceil(c.probeRatio*float64(c.probes)-1e-9)), 1)
	if c.count == 0 && c.length == 0 {
		if target == forAdaptive {
			c.length, c.buckets = defaultWindow, defaultBuckets
		} else {
			c.count = defaultCountWindow
		}
	}
	if target != forAdaptive {
		if c.consecutive == 0 && c.errRatio == 0 && c.errCount == 0 && c.slowRatio == 0 {
			c.consecutive = defaultConsecutive
		}
		if c.count > 0 {
			for _, m := range []struct {
				name string
				v    int64
			}{{"WithErrorRatio minimum", c.errRatioMin}, {"WithErrorCount", c.errCount},
				{"WithErrorCount minimum", c.errCountMin}, {"WithSlowCallRatio minimum", c.slowMin}} {
				if m.v > int64(c.count) {
					return nil, fmt.Errorf("breaker: %s %d exceeds the count window of %d calls: the breaker could never trip", m.name, m.v, c.count)
				}
			}
		}
	}
	return c, nil
}

// needs is what a breaker of configuration c needs of a Guard: nothing
// when it counts outcomes in a count window, has no slow-call strategy and
// reads SystemClock (system).
func needs(c *config, system bool) sluice.Needs {
	if c.count > 0 && c.slowThreshold == 0 && system {
		return 0
	}
	return sluice.NeedsEnd
}

// fixedOptions are the options that say how a breaker is wired, not its
// numbers: Reconfigure refuses them.
var fixedOptions = map[string]bool{"WithClock": true, "WithRandom": true, "WithKeyFunc": true, "WithMaxBreakers": true}

// rebuildConfig builds the configuration that Reconfigure replaces old with:
// opts as the constructor of target takes them, with old's wiring (clock,
// random source, key function, size).
func rebuildConfig(target scope, old *config, opts []Option) (*config, error) {
	for i, o := range opts {
		if o == nil { // named by its place among the caller's options
			return nil, fmt.Errorf("breaker: option %d is nil", i)
		}
	}
	c, err := buildConfig(target, append([]Option{withRandomOf(old)}, opts...))
	if err != nil {
		return nil, err
	}
	for _, u := range c.used[1:] {
		if fixedOptions[u.name] {
			return nil, fmt.Errorf("breaker: Reconfigure: %s cannot change at run time", u.name)
		}
	}
	c.used = nil
	c.clock = old.clock
	c.key, c.maxBreakers = old.key, old.maxBreakers
	return c, nil
}

// withRandomOf gives a rebuilt configuration old's random source, as if
// WithRandom had been given with it, so that WithJitter alone is accepted.
func withRandomOf(old *config) Option {
	return func(c *config) error {
		c.use("withRandomOf", forBreaker|forAdaptive|forGroup)
		c.random = old.random
		return nil
	}
}

func resourceKey(ctx context.Context) string {
	r, _ := sluice.ResourceFrom(ctx)
	return r
}

func checkMin(opt string, minRequests int) error {
	if minRequests < 1 {
		return fmt.Errorf("breaker: %s: minimum requests %d must be at least 1", opt, minRequests)
	}
	return nil
}

func checkRatio(opt string, ratio float64) (int64, error) {
	if !(ratio > 0 && ratio <= 1) {
		return 0, fmt.Errorf("breaker: %s: ratio %v must be in (0, 1]", opt, ratio)
	}
	// Rounded down (with a tolerance for the float's own error), so that a
	// count at exactly the ratio trips: 2 of 3 at 2/3, 1 of 6 at 1/6. A
	// ratio below one part per million is kept at one.
	return max(int64(math.Floor(ratio*ppm+1e-6)), 1), nil
}

// WithConsecutiveFailures trips the breaker at the n-th failure in a row; a
// success ends the run. On a rolling time window, a failure that finds the
// run's first failure gone from the window starts a new run, the older
// failures of the run included: n failures in a row trip the breaker when the
// first of them is still in the window at the n-th. A run of n failures is
// its own minimum volume. When no trip strategy is given, the breaker trips
// at 5 consecutive failures: a dependency that stops answering trips it at
// the fifth timeout in a row, while one failing 1% of calls at random does
// so about once in 10¹⁰ calls. Applies to New and NewGroup.
//
// The strategy also trips the breaker when calls stall, before they fail:
// when more than n calls, and more than 3, were admitted since a success
// last ended, and the third of them more than twice the usual latency of
// a success ago (the slow end of recent successes' latencies), and more
// than 25 ms ago. A
// dependency that stops answering is then refused before its first call
// times out, while a quiet spell or one slow call trips nothing: the calls
// after it still succeed. The check starts once a success has ended since
// the breaker last closed. It needs each call's end (see Needs).
func WithConsecutiveFailures(n int) Option {
	return func(c *config) error {
		c.use("WithConsecutiveFailures", forBreaker|forGroup)
		if n < 1 || int64(n) > maxConsecutive {
			return fmt.Errorf("breaker: WithConsecutiveFailures: %d must be in [1, %d]", n, maxConsecutive)
		}
		c.consecutive = int64(n)
		return nil
	}
}

// WithErrorRatio trips the breaker when failures make up at least ratio
// (0 < ratio ≤ 1) of the calls in the window, once the window holds at least
// minRequests calls. The window sets how fast a ratio sees an outage: on the
// default count window of 100 calls, a ratio of 0.5 trips after 50 failures
// once healthy calls fill it; add WithConsecutiveFailures for a faster trip
// when a dependency stops answering. Off by default. Applies to New and
// NewGroup.
func WithErrorRatio(ratio float64, minRequests int) Option {
	return func(c *config) error {
		c.use("WithErrorRatio", forBreaker|forGroup)
		r, err := checkRatio("WithErrorRatio", ratio)
		if err != nil {
			return err
		}
		if err := checkMin("WithErrorRatio", minRequests); err != nil {
			return err
		}
		c.errRatio, c.errRatioMin = r, int64(minRequests)
		return nil
	}
}

// WithErrorCount trips the breaker when the window holds at least n failures
// among at least minRequests calls. Off by default. Applies to New and
// NewGroup.
func WithErrorCount(n, minRequests int) Option {
	return func(c *config) error {
		c.use("WithErrorCount", forBreaker|forGroup)
		if n < 1 {
			return fmt.Errorf("breaker: WithErrorCount: %d must be at least 1", n)
		}
		if err := checkMin("WithErrorCount", minRequests); err != nil {
			return err
		}
		c.errCount, c.errCountMin = int64(n), int64(minRequests)
		return nil
	}
}

// WithSlowCallRatio trips the breaker when calls slower than threshold,
// whether they succeeded or failed, make up at least ratio (0 < ratio ≤ 1) of
// the calls in the window, once it holds at least minRequests calls. A
// half-open probe slower than threshold counts as a failed probe. Off by
// default. Applies to New and NewGroup.
func WithSlowCallRatio(threshold time.Duration, ratio float64, minRequests int) Option {
	return func(c *config) error {
		c.use("WithSlowCallRatio", forBreaker|forGroup)
		if threshold <= 0 {
			return fmt.Errorf("breaker: WithSlowCallRatio: threshold %v must be positive", threshold)
		}
		r, err := checkRatio("WithSlowCallRatio", ratio)
		if err != nil {
			return err
		}
		if err := checkMin("WithSlowCallRatio", minRequests); err != nil {
			return err
		}
		c.slowThreshold, c.slowRatio, c.slowMin = threshold, r, int64(minRequests)
		return nil
	}
}

// WithCountWindow makes the trip strategies look at the last n counted calls
// (1 ≤ n ≤ 16777216). This is the default for New and NewGroup, with n = 100.
// Applies to New and NewGroup; not with WithRollingWindow.
func WithCountWindow(n int) Option {
	return func(c *config) error {
		c.use("WithCountWindow", forBreaker|forGroup)
		if n < 1 || n > maxCountWindow {
			return fmt.Errorf("breaker: WithCountWindow: %d must be in [1, %d]", n, maxCountWindow)
		}
		c.count, c.length, c.buckets = n, 0, 0
		return nil
	}
}

// WithRollingWindow makes the strategies look at the calls that ended in the
// last length of time, kept in buckets slices (1 ≤ buckets ≤ 65536, each at
// least 1µs long): a bucket leaves the window as a whole. The default for
// NewAdaptive is 10s in 10 buckets. Applies to New, NewAdaptive and NewGroup;
// not with WithCountWindow.
func WithRollingWindow(length time.Duration, buckets int) Option {
	return func(c *config) error {
		c.use("WithRollingWindow", forBreaker|forAdaptive|forGroup)
		if buckets < 1 || buckets > maxBuckets {
			return fmt.Errorf("breaker: WithRollingWindow: %d buckets must be in [1, %d]", buckets, maxBuckets)
		}
		if length <= 0 || length/time.Duration(buckets) < time.Microsecond {
			return fmt.Errorf("breaker: WithRollingWindow: %v in %d buckets: each bucket must last at least 1µs", length, buckets)
		}
		c.count, c.length, c.buckets = 0, length, buckets
		return nil
	}
}

// WithOpenDuration keeps a tripped breaker open for d before it lets probes
// through; the default is 1s. A probe is one call and a failed one reopens
// the breaker, so a short default costs a sick dependency about one call a
// second while the callers fall back, and brings them back within about a
// second of its healing. Applies to New and NewGroup; not with WithBackoff.
func WithOpenDuration(d time.Duration) Option {
	return func(c *config) error {
		c.use("WithOpenDuration", forBreaker|forGroup)
		if d <= 0 {
			return fmt.Errorf("breaker: WithOpenDuration: %v must be positive", d)
		}
		c.openBase, c.openMax = d, d
		return nil
	}
}

// WithBackoff keeps a tripped breaker open for base the first time, and
// doubles that each time a probe fails and the breaker reopens, up to max.
// Closing the breaker brings the next open duration back to base. Applies to
// New and NewGroup; not with WithOpenDuration.
func WithBackoff(base, max time.Duration) Option {
	return func(c *config) error {
		c.use("WithBackoff", forBreaker|forGroup)
		if base <= 0 || max < base {
			return fmt.Errorf("breaker: WithBackoff: base %v must be positive and max %v at least base", base, max)
		}
		c.openBase, c.openMax = base, max
		return nil
	}
}

// WithJitter shortens each open duration by a random share of up to
// fraction (0 ≤ fraction < 1) of it, so that breakers of many instances
// opened by one outage do not all probe the dependency at the same instant.
// The rejections' RetryAfter is the jittered duration. The default is 0: no
// jitter. Applies to New and NewGroup.
func WithJitter(fraction float64) Option {
	return func(c *config) error {
		c.use("WithJitter", forBreaker|forGroup)
		if !(fraction >= 0 && fraction < 1) {
			return fmt.Errorf("breaker: WithJitter: fraction %v must be in [0, 1)", fraction)
		}
		c.jitter = fraction
		return nil
	}
}

// WithHalfOpenProbes lets n probe calls through once the open duration is
// over (the others are rejected at once), and closes the breaker when
// successes make up at least successRatio (0 < successRatio ≤ 1) of the n
// probes; it reopens as soon as that ratio can no longer be reached. The
// default is one probe and a ratio of 1: the first failed probe reopens.
// A probe keeps its slot until its end is reported (a Guard always reports
// it), or counts as failed when it has not ended once its wait (see the
// package doc) has passed since the last probe was admitted. Applies to New
// and NewGroup.
func WithHalfOpenProbes(n int, successRatio float64) Option {
	return func(c *config) error {
		c.use("WithHalfOpenProbes", forBreaker|forGroup)
		if n < 1 || n > maxProbes {
			return fmt.Errorf("breaker: WithHalfOpenProbes: %d probes must be in [1, %d]", n, maxProbes)
		}
		if _, err := checkRatio("WithHalfOpenProbes", successRatio); err != nil {
			return err
		}
		c.probes, c.probeRatio = int64(n), successRatio
		return nil
	}
}

// WithClock sets the clock read by the methods that take no instant
// (ForceOpen, Counts...), and by Done when it was not given the end instant
// (latency -1) and an outcome changes the breaker's state; the default is
// sluice.SystemClock. Inside a Guard the Guard's clock is used: give both
// the same one. Applies to New, NewAdaptive and NewGroup.
func WithClock(clk sluice.Clock) Option {
	return func(c *config) error {
		c.use("WithClock", forBreaker|forAdaptive|forGroup)
		if isnil.Of(clk) {
			return errors.New("breaker: WithClock: nil clock")
		}
		c.clock = clk
		return nil
	}
}

// WithMultiplier sets K of the adaptive throttle: it lets requests through
// freely while they are fewer than K times the accepted ones. Lower is more
// aggressive; the default is 2. K must be at least 1. Applies to NewAdaptive.
func WithMultiplier(k float64) Option {
	return func(c *config) error {
		c.use("WithMultiplier", forAdaptive)
		if !(k >= 1) || math.IsInf(k, 1) {
			return fmt.Errorf("breaker: WithMultiplier: K %v must be a finite number of at least 1", k)
		}
		c.k = k
		return nil
	}
}

// WithRandom sets the source of random draws: the adaptive throttle's, once
// per request while it may reject, and a breaker's open-duration jitter (see
// WithJitter), once per opening. fn returns numbers in [0, 1) and is called
// from many goroutines at once: it must be safe for concurrent use. The
// default is math/rand/v2's Float64. Applies to New, NewAdaptive and
// NewGroup.
func WithRandom(fn func() float64) Option {
	return func(c *config) error {
		c.use("WithRandom", forBreaker|forAdaptive|forGroup)
		if fn == nil {
			return errors.New("breaker: WithRandom: nil function")
		}
		c.random = fn
		return nil
	}
}

// WithMinThrottleRequests keeps the adaptive throttle from rejecting while its
// window holds fewer than n requests, so a handful of failures on a quiet
// service do not reject half of it. The default is 0: the formula alone
// decides. Applies to NewAdaptive.
func WithMinThrottleRequests(n int) Option {
	return func(c *config) error {
		c.use("WithMinThrottleRequests", forAdaptive)
		if n < 0 {
			return fmt.Errorf("breaker: WithMinThrottleRequests: %d must not be negative", n)
		}
		c.minThrottle = int64(n)
		return nil
	}
}

// WithKeyFunc sets how a Group names the breaker of a request; the default
// is sluice.ResourceFrom (requests without a resource share the breaker of
// the empty key). Applies to NewGroup.
func WithKeyFunc(fn func(context.Context) string) Option {
	return func(c *config) error {
		c.use("WithKeyFunc", forGroup)
		if fn == nil {
			return errors.New("breaker: WithKeyFunc: nil function")
		}
		c.key = fn
		return nil
	}
}

// WithMaxBreakers caps how many breakers a Group holds; the default is 1024.
// When a new key arrives at a full Group, the breaker used least recently is
// dropped, unless it is open, half-open or held by ForceClose: open breakers
// are never forgotten while they protect a failing dependency (see Group for
// those gone idle, which are). When no
// breaker can be dropped, the new key's requests go through a shared breaker
// for the overflow, named after the Group with the key "(overflow)". Applies
// to NewGroup.
func WithMaxBreakers(n int) Option {
	return func(c *config) error {
		c.use("WithMaxBreakers", forGroup)
		if n < 1 || n > maxGroup {
			return fmt.Errorf("breaker: WithMaxBreakers: %d must be in [1, %d]", n, maxGroup)
		}
		c.maxBreakers = n
		return nil
	}
}
