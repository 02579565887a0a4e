package otelmetrics

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-go/sluice"
)

// ScopeName is the instrumentation scope of the Meter that New asks for.
const ScopeName = "github.com/sluice-go/sluice/observe/otelmetrics"

// MaxResources is the most resources (routes, methods) that one Guard's
// sluice.call.duration tells apart; the calls of any further one are
// reported under "_OTHER".
const MaxResources = 256

// Metrics is a [sluice.Observer] that reports the Guards given it with
// sluice.WithObserver on OpenTelemetry instruments. One Metrics serves every
// Guard of a service; each must have a name (sluice.WithName) of its own.
type Metrics struct {
	resourceAttr string
	inst         instruments

	mu     sync.Mutex
	guards map[string]bool
}

// Option configures a Metrics.
type Option func(*Metrics) error

// WithResourceAttribute reports each call's resource (sluice.ResourceFrom:
// the route pattern the net/http and Echo middleware set, or the full
// method of the gRPC interceptors) on sluice.call.duration under the
// attribute key, "http.route" or "rpc.method". The default is no resource
// attribute. A Guard's calls with more than MaxResources resources report
// the others as "_OTHER", so that a resource taken from a request's path
// cannot grow the series without bound.
func WithResourceAttribute(key string) Option {
	return func(m *Metrics) error {
		if key == "" {
			return errors.New("otelmetrics: WithResourceAttribute: empty key")
		}
		m.resourceAttr = key
		return nil
	}
}

// New creates sluice's instruments on provider's Meter named ScopeName.
func New(provider metric.MeterProvider, opts ...Option) (*Metrics, error) {
	if provider == nil {
		return nil, errors.New("otelmetrics: nil MeterProvider")
	}
	m := &Metrics{guards: make(map[string]bool)}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("otelmetrics: nil Option")
		}
		if err := o(m); err != nil {
			return nil, err
		}
	}
	if err := m.inst.create(provider.Meter(ScopeName)); err != nil {
		return nil, fmt.Errorf("otelmetrics: %w", err)
	}
	return m, nil
}

// Attach implements sluice.Observer: New of a Guard given m calls it. It
// refuses a Guard without a name, and one whose name another Guard
// reported by m still has.
func (m *Metrics) Attach(g *sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	name := g.Name()
	if name == "" {
		return nil, nil, errors.New("otelmetrics: the Guard has no name: give it one with sluice.WithName")
	}
	m.mu.Lock()
	if m.guards[name] {
		m.mu.Unlock()
		return nil, nil, fmt.Errorf("otelmetrics: a Guard named %q is reported already", name)
	}
	m.guards[name] = true
	m.mu.Unlock()

	w := newWatch(m, g)
	reg, err := m.inst.meter.RegisterCallback(w.collect, m.inst.observables()...)
	if err != nil {
		w.unsubscribe()
		m.forget(name)
		return nil, nil, fmt.Errorf("otelmetrics: %w", err)
	}
	var once sync.Once
	detach := func() {
		once.Do(func() {
			w.unsubscribe()
			_ = reg.Unregister()
			m.forget(name)
		})
	}
	return w.observe, detach, nil
}

func (m *Metrics) forget(name string) {
	m.mu.Lock()
	delete(m.guards, name)
	m.mu.Unlock()
}

// watch is what m keeps of one Guard: its attribute sets, built once, and
// what it reads of its policies.
type watch struct {
	m        *Metrics
	g        *sluice.Guard
	guard    attribute.KeyValue
	policies []policyWatch
	unsubs   []func()

	// The options of sluice.call.duration, by outcome and error type, and
	// of sluice.wait.duration, by admitted or rejected.
	durOpts  [sluice.Released + 1][errorTypes][]metric.RecordOption
	waitOpts [2][]metric.RecordOption

	resMu     sync.RWMutex
	resources map[string]*[sluice.Released + 1][errorTypes][]metric.RecordOption
}

// The error types of a failed call: none (a call that did not fail), a
// timeout, any other.
const (
	errNone = iota
	errTimeout
	errOther
	errorTypes
)

func newWatch(m *Metrics, g *sluice.Guard) *watch {
	w := &watch{m: m, g: g, guard: attribute.String("sluice.guard", g.Name())}
	w.durOpts = w.durationOpts()
	for i, r := range []string{"rejected", "admitted"} {
		w.waitOpts[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(w.guard, attribute.String("sluice.result", r)))}
	}
	for _, p := range g.Policies() {
		pw := policyWatch{p: p, attr: attribute.String("sluice.policy", p.Name())}
		pw.init(w)
		w.policies = append(w.policies, pw)
	}
	return w
}

// durationOpts builds the options of sluice.call.duration, with the extra
// attributes given.
func (w *watch) durationOpts(extra ...attribute.KeyValue) (opts [sluice.Released + 1][errorTypes][]metric.RecordOption) {
	for o := sluice.Success; o <= sluice.Released; o++ {
		for et := range errorTypes {
			kv := append([]attribute.KeyValue{w.guard, attribute.String("sluice.outcome", o.String())}, extra...)
			switch et {
			case errTimeout:
				kv = append(kv, attribute.String("error.type", "timeout"))
			case errOther:
				kv = append(kv, attribute.String("error.type", "_OTHER"))
			}
			opts[o][et] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
		}
	}
	return opts
}

func (w *watch) unsubscribe() {
	for _, u := range w.unsubs {
		u()
	}
	w.unsubs = nil
}

// observe records a call's durations.
func (w *watch) observe(ctx context.Context, e sluice.CallEvent) {
	if e.Wait > 0 {
		i := 0
		if e.Admitted {
			i = 1
		}
		w.m.inst.wait.Record(ctx, e.Wait.Seconds(), w.waitOpts[i]...)
	}
	if !e.Admitted {
		return
	}
	et := errNone
	if e.Outcome == sluice.Failure {
		et = errOther
		if errors.Is(e.Err, sluice.ErrTimeout) {
			et = errTimeout
		}
	}
	opts := &w.durOpts
	if w.m.resourceAttr != "" {
		if res, ok := sluice.ResourceFrom(ctx); ok {
			opts = w.resourceOpts(res)
		}
	}
	w.m.inst.duration.Record(ctx, e.Latency.Seconds(), opts[e.Outcome][et]...)
}

// resourceOpts returns the options of sluice.call.duration for the calls of
// resource res: built on its first call, "_OTHER" past MaxResources.
func (w *watch) resourceOpts(res string) *[sluice.Released + 1][errorTypes][]metric.RecordOption {
	w.resMu.RLock()
	opts, ok := w.resources[res]
	w.resMu.RUnlock()
	if ok {
		return opts
	}
	w.resMu.Lock()
	defer w.resMu.Unlock()
	if opts, ok := w.resources[res]; ok {
		return opts
	}
	if w.resources == nil {
		w.resources = make(map[string]*[sluice.Released + 1][errorTypes][]metric.RecordOption)
	}
	key := res
	if len(w.resources) >= MaxResources {
		key = "_OTHER"
		if opts, ok := w.resources[key]; ok {
			return opts
		}
	}
	built := w.durationOpts(attribute.String(w.m.resourceAttr, key))
	w.resources[key] = &built
	return &built
}
