// Package degrade gives a service lesser answers instead of errors, and lets
// it shed its non-core work on purpose under pressure.
//
//   - [Fallbacks] are declared by cause (rate limited, circuit open,
//     overloaded, concurrency limited, timeout, any other rejection, any
//     other error), each a function or a static [Value]; the most specific
//     declaration answers, and it may decline by returning the error. A
//     Guard takes them as its outermost layer with sluice.WithFallback, and
//     sluice.Execute returns their typed answer. [NewRoutes] picks them
//     per route, by the request's resource.
//   - [Stale] remembers the last good answer per key, for a bounded number
//     of keys and a maximum age, and serves it when a call is rejected or
//     fails, saying that it is stale and how old it is.
//   - A [Switch] is a named degradation switch: handlers check its On,
//     atomic and allocation-free, to skip non-core work. It is set by hand at
//     run time, or by an [Auto] from a signal (a breaker's state, the load
//     guard's shedding, CPU above a level) with hysteresis, so it does not
//     flap; pinned by hand, it is left alone by its Auto until unpinned. A
//     [Shed] policy turns a whole non-core route away while its switch is
//     on. Each switch has a Name, for an admin endpoint that keeps its
//     switches in a map to set, pin and unpin them.
//
// Call timeouts are a Guard option of the root package, sluice.WithTimeout:
// a timeout error matches sluice.ErrTimeout, and a fallback declared with
// [OnTimeout] catches it.
//
// The package imports nothing but the standard library and the root
// package, and starts no goroutine of its own: [Auto.Run] runs on the
// caller's.
package degrade
