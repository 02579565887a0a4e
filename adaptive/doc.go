// Package adaptive protects a service from overload by measuring it, rather
// than by a quota set in advance.
//
// [Guard] is a system-load guard in the BBR style of Kratos and Sentinel's
// adaptive system protection: while the CPU usage of the container is above
// a threshold, it sheds the requests that exceed what the service was seen
// to carry (best throughput × lowest latency over a rolling window), and it
// stays cautious for a cool-off after shedding. System rules on inflight,
// average latency, inbound rate and load average can be added to it, and
// requests marked sluice.PriorityCritical survive longest. Its rejections
// match sluice.ErrOverloaded.
//
// [ConcurrencyLimit] bounds the requests in flight, with a limit learned
// from latency ([Gradient], in the manner of Netflix concurrency-limits'
// Gradient2, or [AIMD]) or static ([NewBulkhead]); callers over the limit are
// rejected with sluice.ErrConcurrencyLimited or wait in a bounded queue.
// Like the Guard's, its Decisions carry no quota (Limit -1), so the
// middleware sends no RateLimit fields for it; its Stats report the limit
// and the requests in flight.
//
// The CPU usage is read from cgroup v2, cgroup v1 or /proc/stat by one
// [SystemSampler] goroutine per process, started by the first Guard that
// needs it and stopped when the last one is closed; nothing starts on
// import, and the request path only loads an atomic. Tests and examples feed
// a [ManualSampler] instead.
//
// Both policies decide with a few atomic operations and allocate nothing on
// the request path, except for a request that waits in a concurrency limit's
// queue (its timer and its place in the queue).
package adaptive
