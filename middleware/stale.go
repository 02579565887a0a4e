package middleware

import (
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware/internal/stale"
)

// StaleCache keeps the last good response (200 to a GET, cacheable) of each
// route, request key and request URI, and answers a GET or HEAD request
// that was rejected, or failed (a 5xx held back, a timeout), with the copy
// kept for it, with an Age field. It is a Guard
// fallback answering an http.Handler: put it in the fallbacks of a route's
// Guard (sluice.WithFallback, before the fallbacks it should take
// precedence over), and the net/http and Echo middleware keep copies of the
// good GET responses of the routes that Guard protects. A request of
// another method, which may change state, is never answered from a copy.
//
// What it keeps follows a shared cache's rules, so that one client never
// gets another's private answer: nothing marked private, no-store or
// no-cache, nothing that sets a cookie or has a Vary field, nothing answered
// to a request that said no-store, nothing answered to a request with
// credentials (Authorization, Cookie), as it came, unless the response says
// public. A response whose origin forbids serving it stale
// (must-revalidate, proxy-revalidate, s-maxage) is served only while fresh.
// A copy's fields do not replace those the response has already (an outer
// middleware's). Ages are measured on the clock of the route's Guard.
type StaleCache = stale.Cache

// StaleCacheOption configures a StaleCache.
type StaleCacheOption = stale.Option

// NewStaleCache returns a StaleCache of at most maxEntries responses, each
// served for at most maxAge after it was stored and kept only when its body
// is at most maxBody bytes (and its header fields at most 16 KiB); each
// must be positive. By default a copy serves
// only the request key (the client address, the API key a Keyer finds) of
// the request that it answered, or, without one (no Keyer, or a Keyer's
// MissingKey), only its connection's address (behind a proxy, the proxy's:
// give a Keyer that reads the client's); see StaleShared.
func NewStaleCache(maxEntries int, maxAge time.Duration, maxBody int, opts ...StaleCacheOption) (*StaleCache, error) {
	return stale.New(maxEntries, maxAge, maxBody, opts...)
}

// StaleOnly makes the cache answer only the rejections of the causes given
// (sluice.CauseCircuitOpen, say, so that a rate-limited client still hears
// 429 and slows down), and timeouts when sluice.CauseTimeout is among
// them; no failure but a timeout. Given no cause, it makes NewStaleCache
// fail. Default: every rejection and failure.
func StaleOnly(causes ...sluice.Cause) StaleCacheOption { return stale.Only(causes...) }

// StaleShared makes the cache keep one copy per route and request URI for
// every client, as a shared HTTP cache does, rather than one per request
// key: a client's first request during an outage is then answered from
// another's copy. It suits responses that do not depend on who asked; the
// rules for what is kept still hold.
func StaleShared() StaleCacheOption { return stale.Shared() }
