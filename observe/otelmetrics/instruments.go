package otelmetrics

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/breakerview"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/statsmath"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
)

// instrument is one of sluice's metrics.
type instrument int

const (
	requests instrument = iota
	fallbacks
	callDuration
	waitDuration
	cbState
	cbTransitions
	cbFailRatio
	rlLimit
	rlRemaining
	rlKeys
	ccLimit
	ccInflight
	ccQueued
	shedding
	cpuUtil
	redisErrors
	redisDecisions
	rtAttempts
	rtRetries
	rtRefusals
	numInstruments
)

// The kinds of data an instrument produces.
const (
	kindCounter   = iota // a monotonic cumulative Sum[int64]
	kindGauge            // a Gauge[int64]
	kindRatio            // a Gauge[float64]
	kindHistogram        // a cumulative Histogram[float64]
)

var instruments = [numInstruments]struct {
	name, unit, desc string
	kind             int
}{
	requests:       {"sluice.requests", "{request}", "Requests a Guard's policies admitted or rejected.", kindCounter},
	fallbacks:      {"sluice.fallback.invocations", "{invocation}", "Requests a Guard's fallbacks answered instead of their error.", kindCounter},
	callDuration:   {"sluice.call.duration", "s", "Duration of the calls a Guard admitted, from admission to end.", kindHistogram},
	waitDuration:   {"sluice.wait.duration", "s", "Time requests waited in a Guard's shapers and queues.", kindHistogram},
	cbState:        {"sluice.circuit_breaker.state", "", "1 for a circuit breaker's current state, 0 for the others.", kindGauge},
	cbTransitions:  {"sluice.circuit_breaker.transitions", "{transition}", "State changes of circuit breakers.", kindCounter},
	cbFailRatio:    {"sluice.circuit_breaker.failure_ratio", "1", "Failures over requests in a circuit breaker's window.", kindRatio},
	rlLimit:        {"sluice.rate_limiter.limit", "{request}", "A token bucket's burst.", kindGauge},
	rlRemaining:    {"sluice.rate_limiter.remaining", "{request}", "Whole tokens left in a token bucket.", kindGauge},
	rlKeys:         {"sluice.rate_limiter.keys", "{key}", "Keys a keyed limiter or a breaker group keeps state for.", kindGauge},
	ccLimit:        {"sluice.concurrency.limit", "{request}", "A concurrency limit's current limit.", kindGauge},
	ccInflight:     {"sluice.concurrency.inflight", "{request}", "Requests holding a slot of a concurrency limit.", kindGauge},
	ccQueued:       {"sluice.concurrency.queued", "{request}", "Requests waiting in a concurrency limit's queue.", kindGauge},
	shedding:       {"sluice.load.shedding", "", "1 while a load shedder sheds, 0 otherwise.", kindGauge},
	cpuUtil:        {"sluice.load.cpu.utilization", "1", "CPU the process uses, as a fraction of the CPU it may use.", kindRatio},
	redisErrors:    {"sluice.redis.errors", "{error}", "Calls of Redis limiters to Redis that failed or timed out.", kindCounter},
	redisDecisions: {"sluice.redis.failure_policy.decisions", "{request}", "Requests a Redis limiter's failure policy decided instead of Redis.", kindCounter},
	rtAttempts:     {"sluice.retry.attempts", "{attempt}", "Attempts of the calls of a Guard that retries, retries included.", kindCounter},
	rtRetries:      {"sluice.retry.retries", "{retry}", "Retries a Guard's retry budget granted.", kindCounter},
	rtRefusals:     {"sluice.retry.budget_refusals", "{retry}", "Retries a Guard's retry budget refused.", kindCounter},
}

// builder gathers the data points of one collection, by instrument.
type builder struct {
	now    time.Time
	ints   [numInstruments][]metricdata.DataPoint[int64]
	floats [numInstruments][]metricdata.DataPoint[float64]
	hists  [numInstruments][]metricdata.HistogramDataPoint[float64]
}

func (b *builder) int(in instrument, v int64, attrs attribute.Set, start time.Time) {
	b.ints[in] = append(b.ints[in], metricdata.DataPoint[int64]{Attributes: attrs, StartTime: start, Time: b.now, Value: v})
}

func (b *builder) float(in instrument, v float64, attrs attribute.Set, start time.Time) {
	b.floats[in] = append(b.floats[in], metricdata.DataPoint[float64]{Attributes: attrs, StartTime: start, Time: b.now, Value: v})
}

// histogram adds h's point, if it counted anything.
func (b *builder) histogram(in instrument, h *lazyHistogram, attrs attribute.Set, start time.Time) {
	if p, ok := h.point(attrs, start, b.now); ok {
		b.hists[in] = append(b.hists[in], p)
	}
}

// metrics returns the instruments that have data points, in their order.
func (b *builder) metrics() []metricdata.Metrics {
	var out []metricdata.Metrics
	for in, d := range instruments {
		m := metricdata.Metrics{Name: d.name, Description: d.desc, Unit: d.unit}
		switch {
		case d.kind == kindCounter && len(b.ints[in]) > 0:
			m.Data = metricdata.Sum[int64]{DataPoints: b.ints[in], Temporality: metricdata.CumulativeTemporality, IsMonotonic: true}
		case d.kind == kindGauge && len(b.ints[in]) > 0:
			m.Data = metricdata.Gauge[int64]{DataPoints: b.ints[in]}
		case d.kind == kindRatio && len(b.floats[in]) > 0:
			m.Data = metricdata.Gauge[float64]{DataPoints: b.floats[in]}
		case d.kind == kindHistogram && len(b.hists[in]) > 0:
			m.Data = metricdata.Histogram[float64]{DataPoints: b.hists[in], Temporality: metricdata.CumulativeTemporality}
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}

// The policies a watch reads, by what they offer. They are read through
// the methods they have in common, not by type, so a policy of a user's
// that offers the same methods is reported alike.
type (
	breakerState interface {
		State() breaker.State
		Counts() breaker.Counts
	}
	tokenBucket interface {
		Burst() int64
		Tokens() float64
	}
	keyed       interface{ Len() int }
	concurrency interface{ Stats() adaptive.Stats }
)

// causeNames are the values of sluice.cause, by sluice.Cause.
var causeNames = [...]string{
	sluice.CauseNone:               "other",
	sluice.CauseRateLimited:        "rate_limited",
	sluice.CauseCircuitOpen:        "circuit_open",
	sluice.CauseOverloaded:         "overloaded",
	sluice.CauseConcurrencyLimited: "concurrency_limited",
	sluice.CauseTimeout:            "timeout",
}

// breakerStates are the values of sluice.circuit_breaker.state.
var breakerStates = [...]struct {
	s    breaker.State
	name string
}{{breaker.StateClosed, "closed"}, {breaker.StateOpen, "open"}, {breaker.StateHalfOpen, "half_open"}}

// policyWatch is what a watch reads of one policy, with its attribute sets
// built once.
type policyWatch struct {
	p        sluice.Policy
	attr     attribute.KeyValue
	plain    attribute.Set // guard, policy
	admitted attribute.Set // result=admitted
	// lastAdmitted is the admitted count last reported: a call shadow
	// rejected but not yet counted admitted, as a snapshot may catch it,
	// must not make the monotonic count go back.
	lastAdmitted atomic.Uint64
	shadow       attribute.Set                                          // result=shadow_rejected
	rejected     [len(causeNames)]attribute.Set                         // result=rejected, by cause
	states       [len(breakerStates)]attribute.Set                      // by breaker state
	trans        *[len(breakerStates)][len(breakerStates)]atomic.Uint64 // transitions, by from and to
}

// admittedCount returns the calls ps counts admitted and not shadow
// rejected, never fewer than last reported.
func (pw *policyWatch) admittedCount(ps sluice.PolicyStats) uint64 {
	n := ps.Admitted - min(ps.ShadowRejected, ps.Admitted)
	for {
		last := pw.lastAdmitted.Load()
		if n <= last {
			return last
		}
		if pw.lastAdmitted.CompareAndSwap(last, n) {
			return n
		}
	}
}

func (pw *policyWatch) init(w *watch) {
	pw.plain = attribute.NewSet(w.guard, pw.attr)
	pw.admitted = attribute.NewSet(w.guard, pw.attr, attribute.String("sluice.result", "admitted"))
	pw.shadow = attribute.NewSet(w.guard, pw.attr, attribute.String("sluice.result", "shadow_rejected"))
	for c, name := range causeNames {
		pw.rejected[c] = attribute.NewSet(w.guard, pw.attr,
			attribute.String("sluice.result", "rejected"), attribute.String("sluice.cause", name))
	}
	if _, ok := breakerview.Of(pw.p).(breakerState); ok {
		for i, s := range breakerStates {
			pw.states[i] = attribute.NewSet(w.guard, pw.attr, attribute.String("sluice.circuit_breaker.state", s.name))
		}
	}
	// A Redis limiter's states are those of its breaker around Redis,
	// which the sluice.redis instruments report: no circuit breaker of the
	// Guard's, whose transitions these count.
	if src, ok := pw.p.(sluice.StateSource); ok && !isRedisLimiter(pw.p) {
		// Transitions by the policy's name, never by the name a change
		// carries: a breaker group names the member that changed.
		trans := new([len(breakerStates)][len(breakerStates)]atomic.Uint64)
		pw.trans = trans
		w.unsubs = append(w.unsubs, src.Subscribe(func(c sluice.StateChange) {
			from, okf := breakerStateIndex(c.From)
			to, okt := breakerStateIndex(c.To)
			if okf && okt { // not a shedder's or a switch's states
				trans[from][to].Add(1)
			}
		}))
	}
}

// breakerStateIndex returns the index in breakerStates of a breaker's
// state as a StateChange names it.
func breakerStateIndex(s string) (int, bool) {
	switch s {
	case "closed":
		return 0, true
	case "open":
		return 1, true
	case "half-open":
		return 2, true
	}
	return 0, false
}

// collect adds the Guard's counters, histograms and its policies' state to
// b.
func (w *watch) collect(b *builder) {
	s := w.g.Stats()
	if c, ok := guardhook.Carried(w.g).(*sluice.Stats); ok {
		// A Guard made again in the place of the one w succeeds (a rules
		// load undone) took that one's counts, which w carries already.
		statsmath.LeaveOut(&s, c)
	}
	for i := range w.policies {
		pw := &w.policies[i]
		ps := s.Policies[i]
		// A call a policy rejected in shadow mode, and let through, is
		// counted once: as shadow_rejected, not as admitted.
		b.int(requests, int64(pw.admittedCount(ps)), pw.admitted, w.start)
		if ps.ShadowRejected > 0 {
			b.int(requests, int64(ps.ShadowRejected), pw.shadow, w.start)
		}
		for c, n := range ps.Rejected {
			if n > 0 {
				b.int(requests, int64(n), pw.rejected[c], w.start)
			}
		}
		pw.collectTransitions(b, w)
		switch p := breakerview.Of(pw.p).(type) {
		case breakerState:
			cur := p.State()
			for j, st := range breakerStates {
				v := int64(0)
				if st.s == cur {
					v = 1
				}
				b.int(cbState, v, pw.states[j], w.start)
			}
			ratio := 0.0
			if c := p.Counts(); c.Requests > 0 {
				ratio = float64(c.Failures) / float64(c.Requests)
			}
			b.float(cbFailRatio, ratio, pw.plain, w.start)
		case tokenBucket:
			b.int(rlLimit, p.Burst(), pw.plain, w.start)
			b.int(rlRemaining, int64(max(p.Tokens(), 0)), pw.plain, w.start)
		case keyed:
			b.int(rlKeys, int64(p.Len()), pw.plain, w.start)
		case concurrency:
			st := p.Stats()
			b.int(ccLimit, st.Limit, pw.plain, w.start)
			b.int(ccInflight, st.Inflight, pw.plain, w.start)
			b.int(ccQueued, st.Waiting, pw.plain, w.start)
			shed := int64(0)
			if st.State == adaptive.StateShedding {
				shed = 1
			}
			b.int(shedding, shed, pw.plain, w.start)
		}
	}
	if _, retries := guardhook.RetryDelay(w.g, context.Background(), 0, time.Time{}, 0); retries {
		set := attribute.NewSet(w.guard)
		b.int(rtAttempts, int64(s.Attempts), set, w.start)
		b.int(rtRetries, int64(s.Retries), set, w.start)
		b.int(rtRefusals, int64(s.BudgetRefusals), set, w.start)
	}
	for c, n := range s.Fallbacks {
		if n > 0 {
			b.int(fallbacks, int64(n), attribute.NewSet(w.guard, attribute.String("sluice.cause", causeNames[c])), w.start)
		}
	}
	w.collectDurations(b, &s)
}

// collectTransitions adds the breaker transitions the policy made.
func (pw *policyWatch) collectTransitions(b *builder, w *watch) {
	if pw.trans == nil {
		return
	}
	for from := range pw.trans {
		for to := range pw.trans[from] {
			if n := pw.trans[from][to].Load(); n > 0 {
				b.int(cbTransitions, int64(n), attribute.NewSet(w.guard, pw.attr,
					attribute.String("sluice.circuit_breaker.from", breakerStates[from].name),
					attribute.String("sluice.circuit_breaker.to", breakerStates[to].name)), w.start)
			}
		}
	}
}

// isRedisLimiter reports whether p is a redislimit.Limiter.
func isRedisLimiter(p sluice.Policy) bool {
	_, ok := p.(*redislimit.Limiter)
	return ok
}
