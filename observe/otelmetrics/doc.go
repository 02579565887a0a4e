// Package otelmetrics reports sluice Guards as OpenTelemetry metrics, under
// sluice's own names.
//
// Build one [Metrics] with [New], give it to the SDK's reader as a producer,
// then give it to every Guard, each with a name of its own:
//
//	metrics, _ := otelmetrics.New()
//	reader := sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithProducer(metrics))
//	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
//	g, _ := sluice.New(sluice.WithName("payments"), sluice.With(limit, payments), sluice.WithObserver(metrics))
//
// Everything is read by pull: a call adds to the Guard's atomic counters
// and duration histograms ([sluice.Guard.Stats]) and the reader turns them
// into data points when it collects; Metrics hears each call only to keep
// the durations by resource ([WithResourceAttribute]) and the waits of
// Guards with a shaper or a queue. A call pays a few atomic adds, and no
// lookup, lock or allocation in the SDK, which recording each call into an
// SDK histogram would cost; the SDK has no histogram read by callback,
// hence a producer.
// Its data are cumulative, since the first Guard of each name was
// attached: a Guard that takes the name of a closed one (a rules reload
// rebuilds a Guard so) carries its counts on, and a Guard closed for good
// reports the counts of its last calls at the next collection. The SDK's
// views and temporality preferences do not apply to a producer's data.
//
// The histograms' buckets are fixed, in seconds: 0.001, 0.0025, 0.005,
// 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, and above.
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
//     buckets; sluice.rate_limiter.keys, gauge {key}, for keyed limiters
//     and breaker groups;
//   - sluice.concurrency.limit, .inflight, .queued, gauges {request};
//   - sluice.load.shedding, gauge, 1 while a load shedder sheds (the
//     Shedder learns from latency, and samples no CPU);
//     sluice.load.cpu.utilization, gauge 1, without attributes: the CPU
//     usage given to [WithCPU] (an adaptive.SystemSampler's), when given;
//   - sluice.fallback.invocations, counter {invocation}: sluice.guard,
//     sluice.cause;
//   - sluice.retry.attempts, .retries and .budget_refusals, counters, by
//     sluice.guard, for a Guard that retries (sluice.WithRetry);
//   - sluice.redis.errors, counter {error}: sluice.policy, error.type
//     (timeout, _OTHER); sluice.redis.failure_policy.decisions, counter
//     {request}: sluice.policy, sluice.result (admitted, rejected); for the
//     Redis limiters given [Metrics.ObserveRedis] as their observer.
//
// Policies of one name in a Guard (two token buckets left with their
// default name) report one series per name: their counts add up, and the
// gauges are the outermost one's. Names of their own keep them apart.
//
// Attributes stay bounded: a Guard's name, its policies' names, fixed
// enumerations, and at most [MaxResources] resources per Guard. No
// instrument ever carries a rate-limit key, a client address or a member of
// a breaker group.
package otelmetrics
