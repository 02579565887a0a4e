// Package sluicegrpc guards gRPC servers and clients with sluice Guards:
// rate limits, circuit breakers, load shedding and concurrency limits, per
// method, answered on the wire the way gRPC clients understand.
//
// Like every interceptor package of the gRPC ecosystem it offers four
// constructors, [UnaryServerInterceptor], [StreamServerInterceptor],
// [UnaryClientInterceptor] and [StreamClientInterceptor], configured with the
// same [Option]s, and one more, [ServerInHandle], that turns calls away
// before gRPC reads them.
//
// # Routes
//
// Each call is guarded by its method's Guard ([WithMethodGuard], keyed by the
// full method "/pkg.Service/Method"), else by the default one ([WithGuard]);
// a method with neither passes through unguarded. Client interceptors can
// also keep a Guard per connection target ([WithTargetGuard]), so one
// interceptor keeps a breaker per dependency. [WithRoutes] shares a
// middleware.Routes table with the HTTP adapters. [WithSkipper] lets
// chosen calls (health checks) by.
//
// Misconfiguration is an error from the constructor, never a silent
// default: no Guard at all, a nil Guard, an option given twice, options
// that exclude each other, a critical method that no Guard guards, a
// server interceptor's Guard that declares retries (only a client makes
// them).
//
// # Rejections
//
// A rejected call never reaches its handler (or, on a client, the server).
// It ends with:
//
//   - codes.ResourceExhausted for a rate limit; codes.Unavailable for an
//     open circuit, an overloaded server or a full concurrency limit;
//   - a message that names the cause and the delay ("sluice: rate limited;
//     retry after 1.5s"), never an error text of the service;
//   - an errdetails.RetryInfo with the delay, and an errdetails.ErrorInfo
//     whose reason is the cause ("RATE_LIMITED") in the domain "sluice", with
//     the rejecting policy's name in its metadata under "policy";
//   - when the rejecting policy has a quota, the draft RateLimit fields as
//     trailer metadata: ratelimit-policy ("name";q=100;w=60) and ratelimit
//     ("name";r=0;t=7);
//   - the delay as gRPC's retry pushback, the grpc-retry-pushback-ms trailer
//     (7000). The answer has no header (it is trailers-only), so a grpc-go
//     client whose service config has a retryPolicy for the code retries
//     the call after the delay ([WithoutRetryPushback] leaves it out, for
//     clients to retry with their own backoff).
//
// # Fallbacks
//
// UnaryServerInterceptor answers with the fallbacks of the method's Guard
// (sluice.WithFallback), as sluice.Execute does: a rejection, a timeout or a
// failure that a fallback declares is answered by the fallback's message,
// or by the status error it declines with. The fallbacks must answer a
// message (any: degrade.New[any], degrade.Value[any]); a Guard with
// fallbacks of another type, or with any fallbacks given to an interceptor
// that cannot answer with them (streams, clients, the tap), makes the
// constructor fail with an error that says what to declare instead.
//
// A handler that returns a sluice rejection its own call met (a client
// interceptor's breaker open for its dependency, a Guard of its own),
// wrapped or not, gets the same answer: the fallback of the method's Guard
// for a unary call, else the rejection's status, and the call counts as
// ignored. On a method the interceptor lets through unguarded (skipped,
// or with no Guard), no Guard's fallback answers: the rejection's status
// does. A Guard's timeout
// wrapping a rejection is a timeout, and answered as one.
// [RejectionOf] reads such a status back into a sluice.Decision on the
// client. A
// client interceptor whose server answers Unavailable or ResourceExhausted
// with a RetryInfo holds its Guard's breakers open for that delay.
//
// # Outcomes
//
// An admitted call's returned error is classified for the breakers and load
// guards ([Classify]): OK is a success; Unavailable, DeadlineExceeded,
// Internal, Unknown and DataLoss are failures; every other code is ignored,
// and so are the guard's own rejections, whatever the classifier
// ([WithClassifier]). On a server, a call or stream whose client went away
// (it cancelled, or its connection closed) is ignored too, whatever its
// handler returned, as the HTTP adapters ignore a request whose client left;
// a Guard's own call timeout is not such an end, and counts as
// DeadlineExceeded. On a client, a call or stream whose context ended before
// it was sent (a handler's inherited deadline that passed) goes on
// unguarded, for gRPC to fail unsent: it is not counted (one admitted as
// its context ended, after a policy made it wait, is Released). A stream is
// admitted once and its outcome is its final status; [WithMessageGuard]
// limits the messages it receives as well.
//
// # Keys
//
// Per-key policies read the call's key from its context. [WithKeyer] sets it
// with a middleware.Keyer of the key functions of package middleware, which see a call as a
// request: middleware.KeyByIP keys by the peer's address (honouring
// x-forwarded-for metadata only from trusted proxies), KeyByHeader by a
// metadata field, KeyByContext by a context value, KeyByRoute by the full
// method. A keyed call also
// carries its full method as its resource (sluice.WithResource), as a keyed
// HTTP request carries its route, so that per-resource policies (a
// breaker.Group) keep their state per method; [WithMethodResource] sets the
// resource without a key. The client interceptors set it whenever the
// call's Guard reads it (a policy declaring sluice.NeedsResource, such as a
// breaker.Group, an observer or a fallback): an outgoing call's resource is
// its own method, not the one of the inbound call whose handler makes it,
// so a client-side breaker.Group keys by the dependency's method. For
// another Guard the context is left as it is, and the call allocates
// nothing.
package sluicegrpc
