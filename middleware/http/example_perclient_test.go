package sluicehttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/ratelimit"
)

// Per-client limits behind a load balancer: each client address gets its
// own token bucket, and the address is taken from X-Forwarded-For only when
// the request came through a proxy the service trusts.
func ExampleMiddleware_perClient() {
	perClient, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 2)
	}, ratelimit.WithName("per-client"), ratelimit.WithMaxKeys(100_000))
	if err != nil {
		panic(err)
	}
	guard, err := sluice.New(sluice.With(perClient))
	if err != nil {
		panic(err)
	}
	defer guard.Close()
	// The load balancers live in 10.0.0.0/8: their X-Forwarded-For is
	// believed, anyone else's is not. IPv6 clients are limited by /64.
	ips, err := middleware.NewIPExtractor(middleware.TrustedProxies("10.0.0.0/8"), middleware.IPv6Prefix(64))
	if err != nil {
		panic(err)
	}
	keyer, err := middleware.NewKeyer(middleware.RejectMissingKey(), middleware.KeyByIP(ips))
	if err != nil {
		panic(err)
	}
	mw, err := sluicehttp.Middleware(sluicehttp.WithGuard(guard), sluicehttp.WithKeyer(keyer))
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))

	get := func(peer, forwardedFor string) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = peer
		if forwardedFor != "" {
			r.Header.Set("X-Forwarded-For", forwardedFor)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	// Through the balancer, two clients: each has a burst of 2 of its own.
	fmt.Println(get("10.0.0.5:4000", "203.0.113.7"), get("10.0.0.5:4000", "203.0.113.7"), get("10.0.0.5:4000", "203.0.113.7"))
	fmt.Println(get("10.0.0.5:4000", "198.51.100.9"))
	// A client claiming another address without a trusted proxy is keyed by
	// its own.
	fmt.Println(get("192.0.2.1:5000", "198.51.100.9"), get("192.0.2.1:5000", "198.51.100.9"), get("192.0.2.1:5000", "198.51.100.9"))
	// Output:
	// 200 200 429
	// 200
	// 200 200 429
}
