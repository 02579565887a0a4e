package otelmetrics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/statsmath"
)

// ScopeName is the instrumentation scope of the metrics that Metrics
// produces.
const ScopeName = "github.com/sluice-go/sluice/observe/otelmetrics"

// maxRetired is the most closed Guards whose counts are kept for a
// successor of their name.
const maxRetired = 1024

// MaxResources is the most resources (routes, methods) that one Guard's
// sluice.call.duration tells apart; the calls of any further one are
// reported under "_OTHER".
const MaxResources = 256

// Metrics is a [sluice.Observer] that reports the Guards given it with
// sluice.WithObserver as OpenTelemetry metrics, and the producer of those
// metrics (go.opentelemetry.io/otel/sdk/metric.Producer) that a reader
// collects: give it to the reader with sdkmetric.WithProducer. One Metrics
// serves every Guard of a service; each must have a name
// (sluice.WithName) of its own.
type Metrics struct {
	resourceAttr string
	cpu          func() float64
	start        time.Time // when m was made: the CPU gauge's start

	mu     sync.Mutex
	guards map[string]*watch
	// retired are the watches of closed Guards, by name: reported once
	// more at the next collection, then kept, frozen, for a successor of
	// their name to carry on.
	retired      map[string]*watch
	retiredOrder []string   // the names of retired, oldest first
	produceMu    sync.Mutex // serializes collections
	redis        sync.Map   // limiter name → *redisCounts
}

// Option configures a Metrics.
type Option func(*Metrics) error

// WithResourceAttribute reports each call's resource (sluice.ResourceFrom:
// the route pattern the net/http and Echo middleware set, or the full
// method of the gRPC interceptors) on sluice.call.duration under the
// attribute key, "http.route" or "rpc.method". The default is no resource
// attribute. A Guard's calls with more than MaxResources resources report
// the others as "_OTHER", so that a resource taken from a request's path
// cannot grow the series without bound. A key of the metrics' own
// attributes (sluice.*, error.type), or one Prometheus reserves or reads
// alike once its dots are underscores (le, quantile, sluice_guard), is an
// error: the series of two Guards would be one, and a scrape fails; so is
// one Prometheus reads as no name at all ("_", "é", not UTF-8).
func WithResourceAttribute(key string) Option {
	return func(m *Metrics) error {
		if key == "" {
			return errors.New("otelmetrics: WithResourceAttribute: empty key")
		}
		if !utf8.ValidString(key) || !hasAlnum(key) {
			// Prometheus reads it as no name ("_", "é"): every scrape fails.
			return fmt.Errorf("otelmetrics: WithResourceAttribute: %q is no name Prometheus can carry: take http.route or rpc.method", key)
		}
		if clashes(key) {
			return fmt.Errorf("otelmetrics: WithResourceAttribute: %q is, or reads as, an attribute of the metrics' own or one Prometheus reserves: take http.route or rpc.method", key)
		}
		m.resourceAttr = key
		return nil
	}
}

// hasAlnum reports whether key has an ASCII letter or digit, which its
// Prometheus form keeps.
func hasAlnum(key string) bool {
	for _, r := range key {
		if r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return true
		}
	}
	return false
}

// clashes reports whether key is, as Prometheus reads it (every character
// but letters and digits an underscore, a run of them one), an attribute
// the metrics set themselves, or a label Prometheus reserves.
func clashes(key string) bool {
	prom := func(k string) string {
		return strings.Map(func(r rune) rune {
			if r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
				return r
			}
			return '_'
		}, k)
	}
	p := prom(key)
	if strings.HasPrefix(p, "__") {
		return true
	}
	// The exporter makes a run of replaced characters one underscore:
	// "error..type" is error_type.
	for strings.Contains(p, "__") {
		p = strings.ReplaceAll(p, "__", "_")
	}
	if strings.HasPrefix(p, "sluice_") || strings.HasPrefix(p, "otel_") {
		return true
	}
	switch p {
	case "error_type", "le", "quantile":
		return true
	}
	return false
}

// WithCPU reports the CPU usage that cpu returns, a fraction from 0 (idle)
// to 1 (all the CPU the process may use), as sluice.load.cpu.utilization,
// read once per collection: a started adaptive.SystemSampler's CPU method
// is one. The default is no such gauge: a load shedder (adaptive.Shedder)
// decides by latency, and reads no CPU of its own to report.
func WithCPU(cpu func() float64) Option {
	return func(m *Metrics) error {
		if cpu == nil {
			return errors.New("otelmetrics: WithCPU: nil function")
		}
		m.cpu = cpu
		return nil
	}
}

// New returns a Metrics, which reports nothing until a reader it was given
// to (sdkmetric.WithProducer) collects.
func New(opts ...Option) (*Metrics, error) {
	m := &Metrics{guards: make(map[string]*watch), retired: make(map[string]*watch), start: time.Now()}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("otelmetrics: nil Option")
		}
		if err := o(m); err != nil {
			return nil, err
		}
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
	defer m.mu.Unlock()
	if m.guards[name] != nil {
		return nil, nil, fmt.Errorf("otelmetrics: a Guard named %q is reported already", name)
	}
	w := newWatch(m, g)
	if r := m.retired[name]; r != nil {
		w.prev, w.start, w.names = r, r.start, r.names
		// The resources its predecessors reported count against
		// MaxResources: a reload must not make room for more.
		next := map[string]*durations{}
		for res := range *r.resources.Load() {
			next[res] = new(durations)
		}
		w.resources.Store(&next)
		delete(m.retired, name)
		m.retiredOrder = slices.DeleteFunc(m.retiredOrder, func(n string) bool { return n == name })
	}
	m.guards[name] = w
	observe := w.observe
	if !w.byResource && !waits(g) {
		observe = nil // the Guard's Stats have every duration it needs
	}
	w.hears = observe != nil
	var once sync.Once
	detach := func() {
		once.Do(func() {
			w.unsubscribe()
			m.mu.Lock()
			delete(m.guards, name)
			if guardhook.Refused(g) {
				// New failed: the Guard never served, and has nothing to
				// report or carry. Its predecessor's counts wait on.
				if w.prev != nil {
					m.retired[name] = w.prev
					m.retiredOrder = append(m.retiredOrder, name)
				}
				m.mu.Unlock()
				return
			}
			m.retired[name] = w
			m.retiredOrder = append(m.retiredOrder, name)
			if len(m.retiredOrder) > maxRetired {
				// Names that come and go (a Guard per host) must not
				// keep counts for good: the oldest is let go.
				delete(m.retired, m.retiredOrder[0])
				m.retiredOrder = slices.Delete(m.retiredOrder, 0, 1)
			}
			m.mu.Unlock()
		})
	}
	return observe, detach, nil
}

// settled reports whether every call of w's Guard has ended and been heard:
// the calls under way when a Guard closes still end, and count, first in
// its Stats and then, when the observers hear them, in w's own histograms
// (the waits; the durations by resource).
func (w *watch) settled() bool {
	g := w.g
	if g == nil {
		return true
	}
	if !guardhook.Settled(g, &w.idle, time.Now()) {
		// A Guard let go of but not retired (a rules reload between its
		// successor's making and its being put in force) still serves;
		// one retired by a reload is read on for a while once idle (a
		// request that found it in force may begin its call after).
		return false
	}
	if !w.hears {
		return true
	}
	s := g.Stats()
	if c, ok := guardhook.Carried(g).(*sluice.Stats); ok {
		statsmath.LeaveOut(&s, c) // counted before w was told of any
	}
	var calls uint64
	for _, h := range append(s.Durations[:], s.Timeouts) {
		for _, n := range h.Counts {
			calls += n
		}
	}
	for _, ps := range s.Policies {
		for _, n := range ps.Rejected {
			calls += n
		}
	}
	if w.heard.Load() >= calls {
		return true
	}
	// One short with nothing in flight: the observers are being told of
	// the last end, or one before the metrics panicked and they never will
	// be. Let go at the third collection that finds it so.
	return w.short.Add(1) >= 3
}

// waits reports whether a policy of g may make calls wait.
func waits(g *sluice.Guard) bool {
	for _, p := range g.Policies() {
		if p.Needs()&sluice.Waits != 0 {
			return true
		}
	}
	return false
}

// Produce returns the metrics of every Guard m reports, cumulative since
// the first Guard of its name was attached, and of the Redis limiters it
// observes ([Metrics.ObserveRedis]). A closed Guard's counts are reported
// until its calls under way have ended (once more, when none was), and a
// Guard that takes a closed one's name carries them on.
// It implements sdkmetric.Producer: a reader given m calls it on each
// collection.
func (m *Metrics) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	m.produceMu.Lock()
	defer m.produceMu.Unlock()
	byStart := func(a, b *watch) int { return a.start.Compare(b.start) }
	m.mu.Lock()
	watches := slices.SortedFunc(maps.Values(m.guards), byStart)
	var retired []*watch
	for _, r := range m.retired {
		if r.g != nil {
			retired = append(retired, r)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(retired, byStart)
	b := builder{now: time.Now()}
	for _, w := range watches {
		wb := w.gather(b.now)
		b.add(&wb)
	}
	for _, r := range retired {
		rb := r.gather(b.now)
		rb.countsOnly()
		b.add(&rb)
		if r.settled() && r.prev == nil {
			// Its last report: it keeps its counts, frozen, and lets
			// its Guard go. Until then, its calls under way, and its
			// predecessors', still end and count.
			r.carried, r.g, r.policies = freeze(&rb), nil, nil
		}
	}
	if m.cpu != nil {
		b.float(cpuUtil, m.cpu(), *attribute.EmptySet(), m.start)
	}
	m.collectRedis(&b)
	return []metricdata.ScopeMetrics{{Scope: instrumentation.Scope{Name: ScopeName}, Metrics: b.metrics()}}, nil
}

// watch is what m keeps of one Guard: its histograms, and what it reads of
// its policies.
type watch struct {
	m        *Metrics
	g        *sluice.Guard
	start    time.Time // when the Guard was attached: its series start
	guard    attribute.KeyValue
	policies []policyWatch
	unsubs   []func()

	// prev is the closed Guard of the same name that w succeeds, read at
	// each collection into carried until its calls under way have ended.
	prev    *watch
	carried *carried

	// sluice.call.duration by outcome and error type, and by resource,
	// when m has a resource attribute (byResource); without one, they are
	// the Guard's own (sluice.Stats.Durations). sluice.wait.duration by
	// admitted (1) or rejected (0).
	byResource bool
	durations  durations
	waits      [2]lazyHistogram
	heard      atomic.Uint64 // the calls observe was told of
	hears      bool          // the Guard tells observe of its calls
	short      atomic.Int32  // collections that found it short of heard calls, none in flight
	idle       time.Time     // when it was first found retired and idle (see settled), under produceMu

	resMu     sync.Mutex // serializes additions to resources
	resources atomic.Pointer[map[string]*durations]
	// names are the resources reported under the Guard's name, by it and
	// by the Guards it took the place of, which may still serve: shared
	// along the chain, so that MaxResources bounds them all.
	names *resourceNames
}

// resourceNames is a set of resource names shared by the watches of one
// Guard name; its mu is taken inside a watch's resMu.
type resourceNames struct {
	mu sync.Mutex
	n  map[string]struct{}
}

// durations are the histograms of a Guard's calls, or of one resource's,
// by outcome and error type.
type durations [sluice.Released + 1][errorTypes]lazyHistogram

// The error types of a failed call: none (a call that did not fail), a
// timeout, any other.
const (
	errNone = iota
	errTimeout
	errOther
	errorTypes
)

var errorTypeNames = [errorTypes]string{errTimeout: "timeout", errOther: "_OTHER"}

func newWatch(m *Metrics, g *sluice.Guard) *watch {
	w := &watch{m: m, g: g, start: time.Now(), guard: attribute.String("sluice.guard", g.Name()), byResource: m.resourceAttr != ""}
	w.resources.Store(&map[string]*durations{})
	w.names = &resourceNames{n: map[string]struct{}{}}
	ps := g.Policies()
	w.policies = make([]policyWatch, len(ps))
	for i, p := range ps {
		pw := &w.policies[i]
		pw.p, pw.attr = p, attribute.String("sluice.policy", p.Name())
		pw.init(w)
	}
	return w
}

func (w *watch) unsubscribe() {
	for _, u := range w.unsubs {
		u()
	}
	w.unsubs = nil
}

// observe counts a call's wait, and its duration by resource.
func (w *watch) observe(ctx context.Context, e sluice.CallEvent) {
	defer w.heard.Add(1)
	if e.Wait > 0 {
		i := 0
		if e.Admitted {
			i = 1
		}
		w.waits[i].record(e.Wait)
	}
	if !e.Admitted || !w.byResource {
		return
	}
	et := errNone
	if e.Outcome == sluice.Failure {
		et = errOther
		if errors.Is(e.Err, sluice.ErrTimeout) {
			et = errTimeout
		}
	}
	d := &w.durations
	if res, ok := sluice.ResourceFrom(ctx); ok && res != "" {
		// An empty resource is none: Prometheus reads an empty label as
		// no label, and the two series would be one, twice.
		d = w.resource(res)
	}
	d[e.Outcome][et].record(e.Latency)
}

// resource returns the histograms of the calls of resource res: made on
// its first call, "_OTHER" past MaxResources. The map is read without a
// lock, and copied to add to it.
func (w *watch) resource(res string) *durations {
	if d, ok := (*w.resources.Load())[res]; ok {
		return d
	}
	w.resMu.Lock()
	defer w.resMu.Unlock()
	old := *w.resources.Load()
	if d, ok := old[res]; ok {
		return d
	}
	key := res
	if !utf8.ValidString(res) {
		// From traffic (a URL's host, a gRPC method): one series no
		// exporter could carry would fail every scrape.
		key = strings.ToValidUTF8(res, "\uFFFD")
		if d, ok := old[key]; ok {
			return d
		}
	}
	w.names.mu.Lock()
	if _, known := w.names.n[key]; !known {
		if len(w.names.n) >= MaxResources {
			key = "_OTHER"
		} else {
			w.names.n[key] = struct{}{}
		}
	}
	w.names.mu.Unlock()
	if d, ok := old[key]; ok {
		return d
	}
	next := maps.Clone(old)
	d := new(durations)
	next[key] = d
	w.resources.Store(&next)
	return d
}

// collectDurations adds the points of the Guard's duration histograms to
// b: those of s, the Guard's Stats, or w's own by resource.
func (w *watch) collectDurations(b *builder, s *sluice.Stats) {
	attrs := func(o, et int, extra ...attribute.KeyValue) attribute.Set {
		kv := append([]attribute.KeyValue{w.guard, attribute.String("sluice.outcome", sluice.Outcome(o).String())}, extra...)
		if et != errNone {
			kv = append(kv, attribute.String("error.type", errorTypeNames[et]))
		}
		return attribute.NewSet(kv...)
	}
	if !w.byResource {
		for o := range s.Durations {
			if sluice.Outcome(o) != sluice.Failure {
				b.guardHistogram(&s.Durations[o], attrs(o, errNone), w.start)
				continue
			}
			b.guardHistogram(&s.Timeouts, attrs(o, errTimeout), w.start)
			b.guardHistogram(&s.Durations[o], attrs(o, errOther), w.start)
		}
	}
	add := func(d *durations, extra ...attribute.KeyValue) {
		for o := range d {
			for et := range d[o] {
				b.histogram(callDuration, &d[o][et], attrs(o, et, extra...), w.start)
			}
		}
	}
	add(&w.durations)
	resources := *w.resources.Load()
	for _, res := range slices.Sorted(maps.Keys(resources)) {
		add(resources[res], attribute.String(w.m.resourceAttr, res))
	}
	for i, r := range []string{"rejected", "admitted"} {
		b.histogram(waitDuration, &w.waits[i], attribute.NewSet(w.guard, attribute.String("sluice.result", r)), w.start)
	}
}
