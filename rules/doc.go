// Package rules declares a service's guards in a file, YAML or JSON, and
// applies the file's changes while the service runs.
//
// [New] loads the file; [Loader.HTTP] and [Loader.Echo] serve it as
// middleware; [Loader.Watch] loads it again whenever it changes, and
// [Loader.Reload] whenever the program asks (on SIGHUP, from an admin
// endpoint). Each load checks the whole file first and reports every
// error with its line; a file with any error changes nothing, and the
// rules in force stay. A policy whose numbers alone changed keeps its state
// (a bucket's tokens, a breaker's open state) and takes the new numbers in
// place where its kind allows it; a policy of another kind, or one whose
// kind cannot change its numbers in place, is made anew. The adapters
// serve the new routes from the next request on.
//
// # Schema
//
// A rules file is one mapping with four fields:
//
//	guards:            # name → guard; at least one
//	  <name>:
//	    policies:      # the chain, outer to inner; see Policies below
//	      - {name: ..., kind: ..., ...}
//	    key:           # optional: what a request is keyed by, for per_key
//	                   # policies and Redis limits; exactly one of
//	      header: X-API-Key           # the header's first value
//	      cookie: session             # a cookie's value
//	      ip:                         # the client address (middleware.IPExtractor)
//	        trusted_proxies: [10.0.0.0/8]
//	        proxy_headers: [X-Forwarded-For]
//	        ipv4_prefix: 32
//	        ipv6_prefix: 64
//	      missing: shared             # or reject (400): a request without a key
//	    timeout: 2s    # optional: the calls' deadline (sluice.WithTimeout)
//	    shadow: false  # optional: see Shadow
//	routes:            # the route table (middleware.RouteTo)
//	  - {route: "GET /items/{id}", guard: api}
//	  - {route: "GET /healthz", guard: none}  # unguarded
//	default: api       # optional: the guard of the routes not listed
//	fallbacks:         # optional: static answers to rejections and failures
//	  - route: "GET /items/{id}"  # optional: without it, every route
//	    cause: rate-limited       # rate-limited, circuit-open, overloaded,
//	                              # concurrency-limited, timeout, rejected, error
//	    status: 200
//	    headers: {Content-Type: application/json}
//	    body: '[]'
//
// Routes are patterns as the adapters name routes: a net/http pattern, an
// Echo route path. A route listed twice, a guard that does not exist, and a
// fallback for a route no route lists are errors; so is a field the schema
// does not name. A missing key of kind shared puts the requests without a
// key in one bucket keyed "unknown" (a client sending that key, or one
// starting with "~", is keyed with a "~" before it, in a bucket of its
// own, whatever its guard's missing key). YAML anchors and aliases are read as what they name, up to 100,000
// nodes in all; merge keys (<<) are refused.
// Numbers and booleans are written bare: a quoted "5", as a quoted "true",
// is a string, and refused. A UTF-8 byte order mark is skipped. A
// fallback's headers may not set the answer's framing (a Content-Length
// other than its body's, Transfer-Encoding, Connection): net/http does. A
// refusal lists at most 100 errors.
//
// # Policies
//
// Each policy has a name, unique in the file, which names it in decisions
// and keeps its state across reloads, and a kind. Rates are count/period
// (100/s, 5/min, 1000/h, 3/250ms); durations are Go durations (250ms, 2s).
//
//	kind            required              optional
//	token-bucket    rate burst            per_key max_keys idle_ttl store fail instances
//	gcra            rate burst            per_key max_keys idle_ttl store fail instances
//	leaky-bucket    rate capacity         per_key max_keys idle_ttl
//	fixed-window    limit window          per_key max_keys idle_ttl store fail instances
//	sliding-window  limit window          buckets (10) per_key max_keys idle_ttl
//	                                      store fail instances
//	sliding-log     limit window          per_key max_keys idle_ttl
//	warm-up         rate burst warm_up cold_factor   per_key max_keys idle_ttl
//	shaper          rate max_wait         per_key max_keys idle_ttl
//	breaker                               consecutive_failures (5) error_ratio
//	                                      error_count slow_call slow_ratio
//	                                      min_requests window buckets (10)
//	                                      window_calls (100) open_for (1s)
//	                                      half_open_probes (1)
//	throttle                              multiplier (2) min_requests (0)
//	                                      window buckets (10s, 10)
//	shedder                               queue max_wait (1000, 200ms)
//	bulkhead        limit                 queue max_wait (none)
//	shed                                  on (false) retry_after (1s)
//
// per_key gives each key of the guard its own limiter (ratelimit.Keyed, at
// most max_keys of them, forgetting a key idle for idle_ttl, which must
// cover the time its limiter takes to be whole again); the guard must
// declare a key. store: redis keeps the limiter's state in Redis, under the
// policy's name (after redislimit's key prefix, "sluice": two services
// sharing a Redis give their policies names of their own), so that every
// instance that loads the same file shares the limit; the program gives the
// client with [WithRedis], and fail says what the limiter does while Redis
// is unreachable: open, closed, or local, deciding with this instance's
// share of the limit, the limit divided by instances (package redislimit's
// default otherwise). A breaker trips on the rules given, together; min_requests
// goes with error_ratio, error_count and slow_call, slow_ratio with
// slow_call; window is a rolling window of that length, window_calls the
// last n calls. A throttle is the adaptive client-side throttle of
// breaker.NewAdaptive, named "breaker/" and its name in decisions. A shed turns its route away while on is true
// (degrade.Shed), and a reload that flips on flips its switch.
//
// Every number is checked as the policy's constructor checks it. Every
// kind takes new numbers in place, through its setter (SetLimit,
// SetMaxKeys, Reconfigure), but for a shed's retry_after, a bulkhead gaining or losing
// its queue, a Redis bucket whose rate and burst make no whole window, and
// the changes a setter refuses (a breaker's count window turned rolling):
// those policies are made anew, and Status.Changes says why. A bulkhead or
// shedder made anew counts the calls still in flight under the one it
// replaces against its limit until they end.
//
// # Shadow
//
// shadow: true on a policy, or on a guard for all its policies, puts it in
// shadow mode (sluice.WithShadow): it decides every request as it would
// when enforcing, and what it would reject is counted
// (sluice.PolicyStats.ShadowRejected, the observers) but goes through. A
// reload that only turns shadow modes on or off keeps the Guard, and its
// counters, and sets the modes in place (sluice.Guard.SetShadow). A mode
// set by hand on a Guard (SetShadow: the dashboard) outlives a reload,
// one that rebuilds the Guard too, until the file changes that mode. Give
// the Guards an observer with [WithGuardOptions] to count.
//
// # Versions
//
// Each load that changes the file's content makes a new [Version]: a
// counter and the content's SHA-256. [Loader.Status] tells the version in
// force, when the last load ended, its error, what it changed, and how
// many loads failed.
package rules
