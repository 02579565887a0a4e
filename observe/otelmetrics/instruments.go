package otelmetrics

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
)

// instruments are sluice's instruments on one Meter.
type instruments struct {
	meter       metric.Meter
	requests    metric.Int64ObservableCounter
	fallbacks   metric.Int64ObservableCounter
	duration    metric.Float64Histogram
	wait        metric.Float64Histogram
	cbState     metric.Int64ObservableGauge
	cbTrans     metric.Int64Counter
	cbFailRatio metric.Float64ObservableGauge
	rlLimit     metric.Int64ObservableGauge
	rlRemaining metric.Int64ObservableGauge
	rlKeys      metric.Int64ObservableGauge
	ccLimit     metric.Int64ObservableGauge
	ccInflight  metric.Int64ObservableGauge
	ccQueued    metric.Int64ObservableGauge
	shedding    metric.Int64ObservableGauge
	rtAttempts  metric.Int64ObservableCounter
	rtRetries   metric.Int64ObservableCounter
	rtRefusals  metric.Int64ObservableCounter
}

// durationBuckets are the bounds, in seconds, of the duration histograms:
// from a millisecond to a minute.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

func (in *instruments) create(m metric.Meter) error {
	in.meter = m
	var err error
	try := func(e error) {
		if err == nil {
			err = e
		}
	}
	var e error
	in.requests, e = m.Int64ObservableCounter("sluice.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests a Guard's policies admitted or rejected."))
	try(e)
	in.fallbacks, e = m.Int64ObservableCounter("sluice.fallback.invocations", metric.WithUnit("{invocation}"),
		metric.WithDescription("Requests a Guard's fallbacks answered instead of their error."))
	try(e)
	in.duration, e = m.Float64Histogram("sluice.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of the calls a Guard admitted, from admission to end."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	try(e)
	in.wait, e = m.Float64Histogram("sluice.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time requests waited in a Guard's shapers and queues."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	try(e)
	in.cbState, e = m.Int64ObservableGauge("sluice.circuit_breaker.state",
		metric.WithDescription("1 for a circuit breaker's current state, 0 for the others."))
	try(e)
	in.cbTrans, e = m.Int64Counter("sluice.circuit_breaker.transitions", metric.WithUnit("{transition}"),
		metric.WithDescription("State changes of circuit breakers."))
	try(e)
	in.cbFailRatio, e = m.Float64ObservableGauge("sluice.circuit_breaker.failure_ratio", metric.WithUnit("1"),
		metric.WithDescription("Failures over requests in a circuit breaker's window."))
	try(e)
	in.rlLimit, e = m.Int64ObservableGauge("sluice.rate_limiter.limit", metric.WithUnit("{request}"),
		metric.WithDescription("A token bucket's burst."))
	try(e)
	in.rlRemaining, e = m.Int64ObservableGauge("sluice.rate_limiter.remaining", metric.WithUnit("{request}"),
		metric.WithDescription("Whole tokens left in a token bucket."))
	try(e)
	in.rlKeys, e = m.Int64ObservableGauge("sluice.rate_limiter.keys", metric.WithUnit("{key}"),
		metric.WithDescription("Keys a keyed limiter keeps state for."))
	try(e)
	in.ccLimit, e = m.Int64ObservableGauge("sluice.concurrency.limit", metric.WithUnit("{request}"),
		metric.WithDescription("A concurrency limit's current limit."))
	try(e)
	in.ccInflight, e = m.Int64ObservableGauge("sluice.concurrency.inflight", metric.WithUnit("{request}"),
		metric.WithDescription("Requests holding a slot of a concurrency limit."))
	try(e)
	in.ccQueued, e = m.Int64ObservableGauge("sluice.concurrency.queued", metric.WithUnit("{request}"),
		metric.WithDescription("Requests waiting in a concurrency limit's queue."))
	try(e)
	in.shedding, e = m.Int64ObservableGauge("sluice.load.shedding",
		metric.WithDescription("1 while a load shedder sheds, 0 otherwise."))
	try(e)
	in.rtAttempts, e = m.Int64ObservableCounter("sluice.retry.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts of the calls of a Guard that retries, retries included."))
	try(e)
	in.rtRetries, e = m.Int64ObservableCounter("sluice.retry.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Retries a Guard's retry budget granted."))
	try(e)
	in.rtRefusals, e = m.Int64ObservableCounter("sluice.retry.budget_refusals", metric.WithUnit("{retry}"),
		metric.WithDescription("Retries a Guard's retry budget refused."))
	try(e)
	return err
}

func (in *instruments) observables() []metric.Observable {
	return []metric.Observable{in.requests, in.fallbacks, in.cbState, in.cbFailRatio, in.rlLimit,
		in.rlRemaining, in.rlKeys, in.ccLimit, in.ccInflight, in.ccQueued, in.shedding,
		in.rtAttempts, in.rtRetries, in.rtRefusals}
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
	plain    metric.ObserveOption                     // guard, policy
	admitted metric.ObserveOption                     // result=admitted
	shadow   metric.ObserveOption                     // result=shadow_rejected
	rejected [len(causeNames)]metric.ObserveOption    // result=rejected, by cause
	states   [len(breakerStates)]metric.ObserveOption // by breaker state
}

func (pw *policyWatch) init(w *watch) {
	pw.plain = metric.WithAttributeSet(attribute.NewSet(w.guard, pw.attr))
	pw.admitted = metric.WithAttributeSet(attribute.NewSet(w.guard, pw.attr, attribute.String("sluice.result", "admitted")))
	pw.shadow = metric.WithAttributeSet(attribute.NewSet(w.guard, pw.attr, attribute.String("sluice.result", "shadow_rejected")))
	for c, name := range causeNames {
		pw.rejected[c] = metric.WithAttributeSet(attribute.NewSet(w.guard, pw.attr,
			attribute.String("sluice.result", "rejected"), attribute.String("sluice.cause", name)))
	}
	if _, ok := pw.p.(breakerState); ok {
		for i, s := range breakerStates {
			pw.states[i] = metric.WithAttributeSet(attribute.NewSet(w.guard, pw.attr,
				attribute.String("sluice.circuit_breaker.state", s.name)))
		}
	}
	if src, ok := pw.p.(sluice.StateSource); ok {
		// Transitions by the policy's name, never by the name a change
		// carries: a breaker group names the member that changed.
		kvs := []attribute.KeyValue{w.guard, pw.attr}
		in := &w.m.inst
		w.unsubs = append(w.unsubs, src.Subscribe(func(c sluice.StateChange) {
			from, okf := breakerStateName(c.From)
			to, okt := breakerStateName(c.To)
			if !okf || !okt {
				return // a shedder's or a switch's states: not a breaker's
			}
			in.cbTrans.Add(context.Background(), 1, metric.WithAttributes(append(kvs[:len(kvs):len(kvs)],
				attribute.String("sluice.circuit_breaker.from", from),
				attribute.String("sluice.circuit_breaker.to", to))...))
		}))
	}
}

func breakerStateName(s string) (string, bool) {
	switch s {
	case "closed", "open":
		return s, true
	case "half-open":
		return "half_open", true
	}
	return "", false
}

// collect observes the Guard's counters and its policies' state.
func (w *watch) collect(_ context.Context, o metric.Observer) error {
	in := &w.m.inst
	s := w.g.Stats()
	for i := range w.policies {
		pw := &w.policies[i]
		ps := s.Policies[i]
		// A call a policy rejected in shadow mode, and let through, is
		// counted once: as shadow_rejected, not as admitted.
		o.ObserveInt64(in.requests, int64(ps.Admitted-ps.ShadowRejected), pw.admitted)
		if ps.ShadowRejected > 0 {
			o.ObserveInt64(in.requests, int64(ps.ShadowRejected), pw.shadow)
		}
		for c, n := range ps.Rejected {
			if n > 0 {
				o.ObserveInt64(in.requests, int64(n), pw.rejected[c])
			}
		}
		switch p := pw.p.(type) {
		case breakerState:
			cur := p.State()
			for j, st := range breakerStates {
				v := int64(0)
				if st.s == cur {
					v = 1
				}
				o.ObserveInt64(in.cbState, v, pw.states[j])
			}
			ratio := 0.0
			if c := p.Counts(); c.Requests > 0 {
				ratio = float64(c.Failures) / float64(c.Requests)
			}
			o.ObserveFloat64(in.cbFailRatio, ratio, pw.plain)
		case tokenBucket:
			o.ObserveInt64(in.rlLimit, p.Burst(), pw.plain)
			o.ObserveInt64(in.rlRemaining, int64(max(p.Tokens(), 0)), pw.plain)
		case keyed:
			o.ObserveInt64(in.rlKeys, int64(p.Len()), pw.plain)
		case concurrency:
			st := p.Stats()
			o.ObserveInt64(in.ccLimit, st.Limit, pw.plain)
			o.ObserveInt64(in.ccInflight, st.Inflight, pw.plain)
			o.ObserveInt64(in.ccQueued, st.Waiting, pw.plain)
			shed := int64(0)
			if st.State == adaptive.StateShedding {
				shed = 1
			}
			o.ObserveInt64(in.shedding, shed, pw.plain)
		}
	}
	if _, retries := w.g.RetryDelay(context.Background(), 0, 0); retries {
		set := metric.WithAttributeSet(attribute.NewSet(w.guard))
		o.ObserveInt64(in.rtAttempts, int64(s.Attempts), set)
		o.ObserveInt64(in.rtRetries, int64(s.Retries), set)
		o.ObserveInt64(in.rtRefusals, int64(s.BudgetRefusals), set)
	}
	for c, n := range s.Fallbacks {
		if n > 0 {
			o.ObserveInt64(in.fallbacks, int64(n), metric.WithAttributeSet(attribute.NewSet(w.guard,
				attribute.String("sluice.cause", causeNames[c]))))
		}
	}
	return nil
}
