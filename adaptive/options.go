package adaptive

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/sluice-go/sluice"
)

// The causes of the Guard's rejections. Each wraps sluice.ErrOverloaded, so
// adapters answer 503 (gRPC Unavailable) for all of them; errors.Is tells
// which rule shed the request.
var (
	// ErrCPUOverload: CPU usage is above the threshold (or was, within the
	// cool-off) and more requests are in flight than the window's best
	// throughput × minimum latency says the service can carry.
	ErrCPUOverload = fmt.Errorf("%w: cpu above threshold and inflight above estimated capacity", sluice.ErrOverloaded)
	// ErrLoadOverload: the one-minute load average is above WithMaxLoad1 and
	// more requests are in flight than the estimated capacity.
	ErrLoadOverload = fmt.Errorf("%w: load average above threshold and inflight above estimated capacity", sluice.ErrOverloaded)
	// ErrMaxInflight: WithMaxInflight requests are already in flight.
	ErrMaxInflight = fmt.Errorf("%w: inflight at maximum", sluice.ErrOverloaded)
	// ErrMaxAvgRT: the average latency over the last second is above
	// WithMaxAvgRT.
	ErrMaxAvgRT = fmt.Errorf("%w: average latency above maximum", sluice.ErrOverloaded)
	// ErrMaxQPS: the inbound rate over the last second reached WithMaxQPS.
	ErrMaxQPS = fmt.Errorf("%w: inbound rate at maximum", sluice.ErrOverloaded)
)

// Option configures a Guard or a ConcurrencyLimit. An option that applies to
// one kind only makes the other kind's constructor return an error.
type Option func(*options) error

type kind uint8

const (
	kindGuard kind = iota + 1
	kindLimit
)

func (k kind) String() string {
	if k == kindGuard {
		return "Guard"
	}
	return "ConcurrencyLimit"
}

type options struct {
	kind kind
	name string

	// Guard.
	sampler        Sampler
	cpuThreshold   float64
	criticalCPU    float64
	criticalFactor float64
	coolOff        time.Duration
	window         time.Duration
	buckets        int
	maxInflight    int64
	maxAvgRT       time.Duration
	maxQPS         float64
	maxLoad1       float64
	thresholdSet   bool
	criticalSet    bool
	coolOffSet     bool

	// ConcurrencyLimit.
	algorithm Algorithm
	queue     int
	maxWait   time.Duration
}

func only(k kind, name string, o *options) error {
	if o.kind != k {
		return fmt.Errorf("adaptive: %s applies to a %v, not a %v", name, k, o.kind)
	}
	return nil
}

// WithName sets the name the policy reports in its decisions, errors and
// state changes; the default is "adaptive/bbr" for a Guard,
// "adaptive/concurrency" for a ConcurrencyLimit and "adaptive/bulkhead" for a
// bulkhead.
func WithName(name string) Option {
	return func(o *options) error {
		if name == "" {
			return errors.New("adaptive: WithName: empty name")
		}
		o.name = name
		return nil
	}
}

// WithSampler sets where a Guard reads CPU usage and the load average. The
// default is the process-wide SystemSampler, started by the first Guard that
// needs it and stopped when the last one is closed. A *SystemSampler passed
// here is started by the Guard and stopped by its Close in the same way; any
// other Sampler (a ManualSampler in tests) is only read.
func WithSampler(s Sampler) Option {
	return func(o *options) error {
		if err := only(kindGuard, "WithSampler", o); err != nil {
			return err
		}
		if s == nil {
			return errors.New("adaptive: WithSampler: nil sampler")
		}
		if v := reflect.ValueOf(s); v.Kind() == reflect.Pointer && v.IsNil() {
			return fmt.Errorf("adaptive: WithSampler: nil %T", s)
		}
		o.sampler = s
		return nil
	}
}

func fraction(name string, v float64) error {
	if math.IsNaN(v) || v <= 0 || v > 1 {
		return fmt.Errorf("adaptive: %s: %v is not a fraction in (0, 1]", name, v)
	}
	return nil
}

// WithCPUThreshold sets the CPU usage, as a fraction of the CPU the process
// may use, above which a Guard checks inflight against its capacity estimate;
// the default is 0.8.
func WithCPUThreshold(f float64) Option {
	return func(o *options) error {
		if err := only(kindGuard, "WithCPUThreshold", o); err != nil {
			return err
		}
		if err := fraction("WithCPUThreshold", f); err != nil {
			return err
		}
		o.cpuThreshold, o.thresholdSet = f, true
		return nil
	}
}

// WithCritical sets how much longer requests marked
// sluice.PriorityCritical survive: they are checked against the capacity
// estimate only when CPU usage is above cpuThreshold (default 0.95, and never
// below the normal threshold), and each system rule (inflight, average
// latency, inbound rate, load) sheds them only beyond factor × its limit
// (default 1.5, at least 1).
func WithCritical(cpuThreshold, factor float64) Option {
	return func(o *options) error {
		if err := only(kindGuard, "WithCritical", o); err != nil {
			return err
		}
		if err := fraction("WithCritical", cpuThreshold); err != nil {
			return err
		}
		if math.IsNaN(factor) || math.IsInf(factor, 0) || factor < 1 {
			return fmt.Errorf("adaptive: WithCritical: factor %v must be at least 1", factor)
		}
		o.criticalCPU, o.criticalFactor, o.criticalSet = cpuThreshold, factor, true
		return nil
	}
}

// WithCoolOff sets how long a Guard stays cautious after it shed a request
// for CPU: during the cool-off it keeps checking inflight against its
// capacity estimate even when CPU usage has dropped below the threshold. A
// shed by a rule (WithMaxInflight, WithMaxQPS, WithMaxAvgRT, WithMaxLoad1)
// starts no cool-off: the rule itself goes on deciding. The default is 1 s;
// 0 turns the cool-off off.
func WithCoolOff(d time.Duration) Option {
	return func(o *options) error {
		if err := only(kindGuard, "WithCoolOff", o); err != nil {
			return err
		}
		if d < 0 {
			return fmt.Errorf("adaptive: WithCoolOff: negative duration %v", d)
		}
		o.coolOff, o.coolOffSet = d, true
		return nil
	}
}

// WithWindow sets the rolling window over which a Guard tracks the maximum
// pass rate and the minimum latency, and the number of buckets it is cut in;
// the default is 10 s in 100 buckets of 100 ms. Buckets must be at least 2
// and at most 10000, and each at least 1 ms long.
func WithWindow(window time.Duration, buckets int) Option {
	return func(o *options) error {
		if err := only(kindGuard, "WithWindow", o); err != nil {
			return err
		}
		if buckets < 2 || buckets > 10000 {
			return fmt.Errorf("adaptive: WithWindow: %d buckets, want 2 to 10000", buckets)
		}
		if window/time.Duration(buckets) < time.Millisecond {
			return fmt.Errorf("adaptive: WithWindow: buckets of %v are shorter than 1ms", window/time.Duration(buckets))
		}
		o.window, o.buckets = window, buckets
		return nil
	}
}

// WithMaxInflight makes a Guard shed a request when n requests are already
// in flight, whatever the CPU usage. The default is no limit.
func WithMaxInflight(n int64) Option {
	return func(o *options) error {
		if err := only(kindGuard, "WithMaxInflight", o); err != nil {
			return err
		}
		if n < 1 {
			return fmt.Errorf("adaptive: WithMaxInflight: %d, want at least 1", n)
		}
		o.maxInflight = n
		return nil
	}
}

// WithMaxAvgRT makes a Guard shed requests while the average latency of the
// requests that ended in the last second is above d, whatever the CPU usage.
// The default is no limit.
func WithMaxAvgRT(d time.Duration) Option {
	return func(o *options) error {
		if err := only(kindGuard, "WithMaxAvgRT", o); err != nil {
			return err
		}
		if d <= 0 {
			return fmt.Errorf("adaptive: WithMaxAvgRT: %v, want > 0", d)
		}
		o.maxAvgRT = d
		return nil
	}
}

// WithMaxQPS makes a Guard shed a request when qps requests were already
// admitted in the last second, whatever the CPU usage. The default is no
// limit.
func WithMaxQPS(qps float64) Option {
	return func(o *options) error {
		if err := only(kindGuard, "WithMaxQPS", o); err != nil {
			return err
		}
		if math.IsNaN(qps) || math.IsInf(qps, 0) || qps < 1 {
			return fmt.Errorf("adaptive: WithMaxQPS: %v, want at least 1", qps)
		}
		o.maxQPS = qps
		return nil
	}
}

// WithMaxLoad1 makes a Guard check inflight against its capacity estimate
// while the one-minute load average (Linux /proc/loadavg, read by the
// sampler) is above load, whatever the CPU usage. The default is no limit.
func WithMaxLoad1(load float64) Option {
	return func(o *options) error {
		if err := only(kindGuard, "WithMaxLoad1", o); err != nil {
			return err
		}
		if math.IsNaN(load) || math.IsInf(load, 0) || load <= 0 {
			return fmt.Errorf("adaptive: WithMaxLoad1: %v, want > 0", load)
		}
		o.maxLoad1 = load
		return nil
	}
}

// WithAlgorithm sets how a ConcurrencyLimit learns its limit: Gradient{} (the
// default), AIMD{} or Fixed{}.
func WithAlgorithm(a Algorithm) Option {
	return func(o *options) error {
		if err := only(kindLimit, "WithAlgorithm", o); err != nil {
			return err
		}
		if a == nil {
			return errors.New("adaptive: WithAlgorithm: nil algorithm")
		}
		o.algorithm = a
		return nil
	}
}

// WithQueue lets up to size callers over a ConcurrencyLimit's limit wait for
// a slot, each for at most maxWait (0: until its context is done), in arrival
// order. The default is no queue: callers over the limit are rejected at once.
func WithQueue(size int, maxWait time.Duration) Option {
	return func(o *options) error {
		if err := only(kindLimit, "WithQueue", o); err != nil {
			return err
		}
		if size < 0 || maxWait < 0 {
			return fmt.Errorf("adaptive: WithQueue: size %d and wait %v must not be negative", size, maxWait)
		}
		o.queue, o.maxWait = size, maxWait
		return nil
	}
}

func buildOptions(k kind, name string, opts []Option) (options, error) {
	o := options{kind: k, name: name}
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
