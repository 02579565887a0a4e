// Package sluiceecho serves sluice Guards as Echo middleware.
//
// [Middleware] runs each request through the Guard its route maps to in a
// middleware.Routes table keyed by Echo's route path (c.Path(): "/items/:id"),
// or by method and route path ("POST /cart") where the table has such an
// entry.
// It answers exactly as the net/http adapter does: admitted requests get the
// IETF draft RateLimit fields of their Decision; rejected ones get 429 or 503
// with Retry-After and an RFC 9457 problem body, unless a fallback of the
// route's Guard answering an http.Handler (degrade.New[http.Handler], a
// middleware.StaleCache) or a deny handler answers. The outcome is
// classified from the final status, including an
// error the handler returns (an *echo.HTTPError's code, 500 for any other
// error) that Echo's error handler renders later. A handler that returns a
// sluice rejection its own call met (a breaker open for its dependency, as
// sluicehttp.Transport returns it) gets it answered as the middleware's
// own: the fallbacks of the route's Guard, 429 or 503 with Retry-After and
// the problem body, or the deny handler's answer; on a route it lets
// through unguarded (skipped, or with no Guard), no Guard's fallback
// answers. An
// *echo.HTTPError keeps the status the handler chose, even when its
// Internal is such a rejection.
//
// Keyed policies get each request's key from a middleware.Keyer
// ([WithKeyer]); [KeyByValue] keys requests by what an earlier Echo
// middleware stored with c.Set, such as the authenticated user.
package sluiceecho
