package routing_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware/internal/routing"
)

func ExampleRenderer_Rejected() {
	d := sluice.Decision{
		Policy: "ratelimit/per-ip", Limit: 100, Remaining: 0,
		Reset: time.Minute, RetryAfter: 6500 * time.Millisecond, Cause: sluice.ErrRateLimited,
	}
	h := http.Header{}
	var r routing.Renderer
	status := r.Rejected(h, nil, d, true)
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
