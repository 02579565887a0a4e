// Package middleware is what sluice's adapters (middleware/http,
// middleware/echo, middleware/grpc) are configured with, the same for each:
// the route table that maps a route to a *sluice.Guard, client IP and key
// extraction, skippers, outcome classification of HTTP statuses and gRPC
// codes, the stale cache, and how a rejection is rendered ([Renderer]).
//
// Each adapter turns its transport's request into a [Request], finds the
// route's Guard in a [Routes] table, asks it, and renders the Decision the
// same way, so that every transport answers the same request the same way.
//
// # Routes and keys
//
// A [Routes] table maps a route pattern (an http.ServeMux pattern such as
// "GET /items/{id}", an Echo route path, a gRPC full method) to its Guard,
// with a default for unlisted routes; for routers whose routes carry no
// method (Echo), a "POST /cart" entry is picked over the "/cart" one.
// [Routes.Close] closes every Guard of the table.
// A [Keyer] finds each request's key with its [KeyFunc]s (the client
// address, a header, a cookie, a context value, the route);
// [KeyPerRoute] gives each route a key function of its own. A [StaleCache],
// one of a Guard's fallbacks, answers the rejections of the Guard's HTTP and
// Echo routes with copies of their last good GET responses.
//
// # Header fields
//
// A rejection for a rate limit is answered with 429 Too Many Requests, one for
// an open circuit, an overloaded service or a full concurrency limit with 503
// Service Unavailable. Every rejection carries Retry-After in
// whole seconds, rounded up. Decisions that carry a quota (Limit ≥ 0) are
// also described with the IETF draft fields (draft-ietf-httpapi-ratelimit-headers):
//
//	RateLimit-Policy: "ratelimit/per-ip";q=100;w=60
//	RateLimit: "ratelimit/per-ip";r=0;t=7
//
// and, on request ([Renderer]), the older X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset fields. On a rejection t equals Retry-After.
//
// # Client IP
//
// [IPExtractor] takes the client's address from the direct peer. It reads
// X-Forwarded-For (or the fields [ProxyHeaders] names: Forwarded,
// X-Real-IP) only when the direct peer is a trusted proxy, and then takes
// the right-most address that is not itself a trusted proxy, so a client
// cannot choose its own address by sending the header itself.
package middleware
