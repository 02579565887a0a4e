// Package dashboard serves a live page of a program's Guards: every Guard
// and its policies with their state, a 60-second chart of admitted and
// rejected calls per second by cause and of call latency (p50, p99), the
// last 100 events with their wall-clock times, and, when an authorizer
// allows it, admin actions: force a breaker open or closed (it shows as
// held until reset) and reset it, change a token bucket's rate and burst,
// put a policy or a whole Guard in shadow mode and back
// (sluice.Guard.SetShadow), pin a degradation switch on or off and unpin it
// (back to its degrade.Auto).
//
// A Dashboard is a [sluice.Observer]: give it to each Guard it shows with
// sluice.WithObserver. It is also the http.Handler of the page; mount it in
// one line, on its own port or under a path of any mux:
//
//	mux.Handle("/debug/sluice/", dash)
//
// Under its path it serves the page, its script and style, a JSON snapshot
// at api/state and the same snapshot once a second as server-sent events at
// api/events. It needs nothing from outside the program: no CDN, no
// framework, so it works offline.
//
// Per policy it shows what the policy's kind has: a breaker's counts and,
// while open, the time to its next probe; a load guard's limit, in-flight
// and queued calls, and the CPU usage that [WithCPU] reads; a token bucket's
// rate, burst and tokens; any other limiter's limit, window and remaining
// quota as its last decision carried them; shadow mode. A Redis limiter's
// failure policy and Redis's last error show when its observer is the one
// package redisdash makes.
//
// Admin actions are off unless [WithAuthorizer] is given: without it the
// page shows no buttons and api/action answers 403 Forbidden. With it, an
// action is taken only by a POST that the authorizer allows, that no
// browser marks cross-origin, and that carries the token of a page the
// Dashboard served. Every action, taken or refused, is logged through slog,
// counted and shown in the event list.
//
// The snapshot is bounded whatever the traffic: per keyed limiter, the key
// count and the 10 keys with the most rejections, out of a bounded sample,
// never every key. Those keys are what the adapters key requests by (client
// addresses, user names): where they are not for every reader of the page,
// serve it only behind the program's own authentication.
package dashboard
