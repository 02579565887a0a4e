package middleware_test

import (
	"fmt"
	"net/http"

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
	fmt.Println(rs != nil)

	// A malformed pattern is an error, not a route that never matches.
	_, err = middleware.NewRoutes(middleware.RouteTo("GET /x/{", api))
	fmt.Println(err)
	// Output:
	// true
	// middleware: RouteTo: malformed pattern "GET /x/{": bad wildcard segment "{": a wildcard is a whole segment, {name} or {name...}
}

func ExampleClassifyHTTPStatus() {
	fmt.Println(middleware.ClassifyHTTPStatus(200), middleware.ClassifyHTTPStatus(404), middleware.ClassifyHTTPStatus(502))
	// Output:
	// success ignored failure
}
