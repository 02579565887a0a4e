// Package redislimit keeps rate limits in Redis, so that a fleet of instances
// shares one limit instead of each granting its own: the algorithms of package
// ratelimit (GCRA, the default; token bucket; fixed window; sliding window,
// a ring of buckets), each a sluice.Policy with the same Decision (Limit,
// Remaining, Reset, RetryAfter) as its local twin (but for a release of a
// request admitted before a SetLimit that changed the rate: Redis gives
// back what the admission took, a local GCRA nothing), and a sliding window
// weighted from two fixed windows (NewSlidingWindowWeighted), which keeps
// less per key than a ring and estimates.
//
// # One script, Redis time, integers
//
// Every decision is made by a Lua script call, run with EVALSHA and sent again
// with EVAL when the server answers NOSCRIPT (after a restart or SCRIPT
// FLUSH). A limiter of one limit runs the script of its algorithm alone;
// one built by All runs a script that decides all of its limits. The
// script reads the time from Redis TIME, in integer microseconds, so the
// clocks of the instances never matter, and an admission never moves a
// stored instant backwards: a Redis whose clock steps back keeps the later
// state, and its waits include the lag. All its
// arithmetic is on integers: 10 per second leaves Remaining 9 after the first
// request. A rejected request writes nothing; every write sets a TTL just long
// enough for the state it keeps, so idle keys disappear. Window reports a
// limiter's window (a bucket's time to refill), which the middleware sends
// as the w parameter of RateLimit-Policy, as for the local limiters.
//
// # Keys and Redis Cluster
//
// A limit's key for a request is
//
//	<prefix>:<name>:<algorithm>[/<period>]:{<hash of the request's key>}
//
// with the prefix "sluice" (WithPrefix), the limiter's name (WithName), a
// letter for the algorithm (with the number of buckets of a ring) and, for
// a window, its period in microseconds (a ring's bucket, the window of the
// others: its state is counted in it), and the first 128
// bits of the SHA-256 of the request's key (sluice.KeyFrom, or WithKeyFunc)
// in hex as the Cluster hash tag. A GCRA's and a token bucket's keys carry
// no rate: their state (an instant; the tokens the bucket lacks) reads the
// same at any, so an instance whose rate SetLimit changed and one started
// with the new rate share one limit. Two such limiters of one name share
// theirs whatever their rates: give each its own name. The user's
// key is hashed, so braces in it cannot steer keys to a slot; and the hash tag
// holds the user's key alone, not the limiter's name, so all the limits keyed
// by one user share a slot, which lets All decide them in one script.
// WithPerResource adds the hash of the request's resource (a route) outside
// the braces: a per-user-and-route limit stays in the user's slot.
//
// # Hot keys
//
// A key has at most 8 calls to Redis in flight: when it has 8 (one route's
// limit for the whole fleet, under load), it does not send a call per
// request: its further requests queue and go to Redis together when a call
// returns, up to 64 decided by one script call, each as a call of its own at
// that instant would decide it. With 64 callers on one key a decision then
// takes a quarter to a third of the time a call per request does (3.2–4.2
// µs against 12.4–13.7 on 2 cores), and Redis runs one script per batch;
// the breaker around Redis counts such a call as one. WithoutCoalescing
// turns it off.
//
// # Several limits in one round trip
//
// All combines limiters into one: every limit is decided by the same script
// call and the request is admitted only if all admit; a rejection charges none
// of them.
//
// # When Redis fails
//
// Each call to Redis has its own timeout (WithTimeout, 50 ms by default: a
// limiter must not add the client's seconds to a request), and a breaker
// around Redis (a breaker.Breaker) opens after consecutive failures
// (WithBreaker), so an outage costs nothing per request once it has tripped;
// after its open interval one half-open probe tries Redis, and its success
// restores normal service.
// While Redis cannot decide, each limiter's failure policy does: WithFailOpen
// (the default) admits, WithFailClosed rejects with ErrUnavailable (HTTP 503),
// WithLocalFallback(n) decides with a local limiter of the same algorithm
// holding 1/n of the limit, n being the number of instances; give one of
// them at most, as two would contradict each other. Such decisions
// carry the limiter's own name, as a Guard names every decision by its
// policy's Name: a local share's quota reaches clients in the RateLimit
// fields under the limiter's name; fail-open admissions carry no quota,
// fail-closed rejections only Retry-After. The observer (WithObserver) hears
// which failure policy decided, of every Redis error and of every change of
// the breaker's state, which the limiter's Subscribe also reports.
//
// WithNegativeCache keeps a rejected key's RetryAfter in memory and rejects
// the key locally until it has passed, without a round trip.
//
// # The client
//
// Give the limiters a go-redis client (redis.UniversalClient: standalone,
// Sentinel or Cluster) configured with ContextTimeoutEnabled: true, without
// which go-redis ignores the deadline of the limiter's timeout (the
// constructors reject such a *redis.Client or *redis.ClusterClient). The
// scripts are sent as commands go-redis never sends a second time once they
// may have reached Redis, whatever the client's MaxRetries and MaxRedirects:
// a script run twice would charge a request twice, so a call whose reply is
// lost goes to the failure policy instead. A Cluster's MOVED and ASK
// redirects, which come before a script runs, are followed. The limiters
// never close the client.
//
// # Failover
//
// Nothing but ContextTimeoutEnabled needs setting on the client for a
// failover: the limiters come back to Redis on their own with go-redis's
// defaults. A Cluster client (redis.NewClusterClient, or
// redis.NewUniversalClient given several addresses) routes a key by a map of
// slots that go-redis refreshes only on a MOVED reply or once it is older
// than ClusterStateReloadInterval (60 s), and a dead master sends no MOVED;
// so a limiter on a Cluster asks the client to reload the map (ReloadState)
// when a call fails in a way that can mean the topology moved (a connection
// refused, reset or timed out; CLUSTERDOWN, TRYAGAIN, MOVED, ASK, LOADING,
// READONLY, MASTERDOWN), shortly before the breaker around Redis sends its
// half-open probe, and when it does; at most once per 250 ms, so a flapping
// node cannot keep the client reloading. A shorter
// ClusterStateReloadInterval is not needed. A Sentinel-managed client
// (redis.NewFailoverClient) asks the sentinels for the master's address on
// every new connection and hears of a switch from them, so it follows a
// failover by itself.
//
// While a master is down and until its replica has taken over (on a
// Cluster, about the cluster-node-timeout and an election; under Sentinel,
// down-after-milliseconds and an election), the keys of its slots are
// decided by each limiter's failure policy: fail-open admits, fail-closed
// rejects, a local share decides, each within the limiter's timeout (the
// first ones; then at once, the breaker around Redis having opened). Other
// slots' keys, on live masters, are still decided by Redis. Once the replica
// is promoted, the limiters decide by Redis again within about a breaker's
// open time or two (1 to 2 s at the defaults; measured 0.1 to 1.1 s on a
// Cluster with a cluster-node-timeout of 1 s, 0.8 to 2.0 s under Sentinel
// with down-after-milliseconds 1000, 16 callers, 2 cores). The writes the
// replica had not received when its master died are lost: a few requests
// may be admitted again. A limiter built by All keeps all its keys in one
// slot, so they move together: a request is decided by Redis for all of
// them or, while the slot is down or moving (MOVED, ASK and TRYAGAIN replies
// past the client's MaxRedirects), by the failure policies for all of them;
// never partly by each.
package redislimit
