package middleware_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
)

func ExampleIPExtractor_ClientIP() {
	ipx, err := middleware.NewIPExtractor(
		middleware.TrustedProxies("10.0.0.0/8"),
		middleware.IPv6Prefix(64),
	)
	if err != nil {
		panic(err)
	}
	h := http.Header{"X-Forwarded-For": {"203.0.113.50, 198.51.100.7, 10.0.0.2"}}

	// From a trusted proxy: the right-most address that is not a proxy.
	a, _ := ipx.ClientIP("10.0.0.1:40000", h.Values)
	fmt.Println(a)
	// From anyone else the header is ignored.
	a, _ = ipx.ClientIP("198.51.100.99:40000", h.Values)
	fmt.Println(a)
	// IPv6 clients are grouped by /64.
	a, _ = ipx.ClientIP("[2001:db8:aa:bb:1:2:3:4]:443", nil)
	fmt.Println(a)
	// Output:
	// 198.51.100.7
	// 198.51.100.99
	// 2001:db8:aa:bb::
}

func ExampleRenderer_Rejected() {
	d := sluice.Decision{
		Policy: "ratelimit/per-ip", Limit: 100, Remaining: 0,
		Reset: time.Minute, RetryAfter: 6500 * time.Millisecond, Cause: sluice.ErrRateLimited,
	}
	h := http.Header{}
	var r middleware.Renderer
	status := r.Rejected(h, nil, d)
	fmt.Println(status)
	fmt.Println("Retry-After:", h.Get("Retry-After"))
	fmt.Println("RateLimit-Policy:", h.Get("RateLimit-Policy"))
	fmt.Println("RateLimit:", h.Get("RateLimit"))
	fmt.Printf("%s", r.AppendProblem(nil, d))
	// Output:
	// 429
	// Retry-After: 7
	// RateLimit-Policy: "ratelimit/per-ip";q=100
	// RateLimit: "ratelimit/per-ip";r=0;t=7
	// {"type":"urn:sluice:problem:rate-limited","title":"Too Many Requests","status":429,"detail":"The request rate limit is exceeded; retry after the delay in Retry-After.","retryAfter":7}
}

func ExampleNewRoutes() {
	api, err := sluice.New()
	if err != nil {
		panic(err)
	}
	rs, err := middleware.NewRoutes(
		middleware.DefaultRoute(api),
		middleware.RouteTo("GET /healthz", nil), // never guarded
	)
	if err != nil {
		panic(err)
	}
	fmt.Println(rs.Match("GET /items").Guard == api)
	fmt.Println(rs.Match("GET /healthz") == nil)
	// Output:
	// true
	// true
}

func ExampleClassifyGRPCCode() {
	// google.golang.org/grpc/codes: 0 OK, 5 NotFound, 14 Unavailable.
	fmt.Println(middleware.ClassifyGRPCCode(0), middleware.ClassifyGRPCCode(5), middleware.ClassifyGRPCCode(14))
	fmt.Println(middleware.ClassifyHTTPStatus(200), middleware.ClassifyHTTPStatus(404), middleware.ClassifyHTTPStatus(502))
	// Output:
	// success ignored failure
	// success ignored failure
}
