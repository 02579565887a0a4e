// Package otelmetrics reports sluice Guards on OpenTelemetry metric
// instruments, under sluice's own names.
//
// Build one [Metrics] from a MeterProvider with [New], then give it to every
// Guard, each with a name of its own:
//
//	m, _ := otelmetrics.New(provider)
//	g, _ := sluice.New(sluice.WithName("payments"), sluice.With(limit, payments), sluice.WithObserver(m))
//
// Counts are read by pull: the observable instruments read each Guard's
// counters ([sluice.Guard.Stats]) and its policies' state when the reader
// collects, so a Guard pays nothing for them per call. Only the histograms
// of call and wait durations, and breaker transitions, are recorded as they
// happen.
//
// The instruments, following the shape of OpenTelemetry's rate-limiting
// conventions (aspnetcore.rate_limiting.*):
//
//   - sluice.requests, counter {request}: sluice.guard, sluice.policy,
//     sluice.result (admitted, rejected, shadow_rejected), sluice.cause on rejections
//     (rate_limited, circuit_open, overloaded, concurrency_limited, timeout,
//     other);
//   - sluice.call.duration, histogram s: sluice.guard, sluice.outcome
//     (success, failure, ignored, released), error.type on failures
//     (timeout, _OTHER), and the call's resource under the attribute given
//     to [WithResourceAttribute] (http.route, rpc.method);
//   - sluice.wait.duration, histogram s: time spent waiting in a shaper or a
//     concurrency queue, by sluice.guard and sluice.result;
//   - sluice.circuit_breaker.state, gauge: one series per state
//     (sluice.circuit_breaker.state = closed, open, half_open), 1 for the
//     current one; sluice.circuit_breaker.transitions, counter, with
//     sluice.circuit_breaker.from and .to; sluice.circuit_breaker.failure_ratio,
//     gauge;
//   - sluice.rate_limiter.limit and .remaining, gauges {request}, for token
//     buckets; sluice.rate_limiter.keys, gauge {key}, for keyed limiters;
//   - sluice.concurrency.limit, .inflight, .queued, gauges {request};
//   - sluice.load.shedding, gauge, 1 while a load shedder sheds (the
//     Shedder learns from latency, and samples no CPU);
//   - sluice.fallback.invocations, counter {invocation}: sluice.guard,
//     sluice.cause;
//   - sluice.retry.attempts, .retries and .budget_refusals, counters, by
//     sluice.guard, for a Guard that retries (sluice.WithRetry).
//
// Attributes stay bounded: a Guard's name, its policies' names, fixed
// enumerations, and at most [MaxResources] resources per Guard. No
// instrument ever carries a rate-limit key, a client address or a member of
// a breaker group.
package otelmetrics
