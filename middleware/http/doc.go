// Package sluicehttp serves sluice Guards as net/http middleware, and guards
// outgoing calls with an http.RoundTripper.
//
// On the server side, [Middleware] runs each request through the Guard its
// route maps to (a middleware.Routes table keyed by http.ServeMux pattern, or
// by a route function for other routers). An admitted request gets the IETF
// draft RateLimit and RateLimit-Policy fields of its Decision, runs, and its
// final status is classified (5xx a failure, 4xx ignored) for the Guard's
// breakers and load guards. A rejected request is answered, in order of
// preference, by the fallbacks of its route's Guard that answer an
// http.Handler (sluice.WithFallback with degrade.New[http.Handler], or a
// middleware.StaleCache: for GET and HEAD, the stale copy of the last good
// GET response with Age, which the middleware keeps), by the deny handler,
// or by 429 / 503 with Retry-After and an RFC 9457 problem body that names
// the cause and never an internal error. [Middleware] returns an error for a
// misconfiguration, a Guard with a fallback it cannot serve included.
//
// The response writer it hands to the handler records the status without
// allocating, and keeps http.Flusher, http.Hijacker and io.ReaderFrom;
// http.ResponseController reaches the server's writer through its Unwrap.
//
// On the client side, [Transport] guards each outgoing call with the Guard of
// its host (typically a breaker, a limiter and a timeout), classifies the
// answer by status, opens the host's breaker for as long as a dependency's
// Retry-After asks on 429 and 503, and returns the Guard's rejection (an
// error matching sluice.ErrRejected; sluice.RejectionOf reads its
// Decision) without calling the dependency when the Guard rejects. A handler that gets
// such a rejection passes it to [Reject], which answers it as the middleware
// answers its own: with the fallbacks of the route's Guard (the stale copy
// of its last good response, say), else the deny handler, else 429 or 503 with
// Retry-After (for a request the middleware let through unguarded, Reject
// answers nothing and reports false). A call whose context has already
// ended is not sent and counts for nothing. [RoundTripper.Guard] hands out
// a host's Guard, to look at its state or force its breaker.
package sluicehttp
