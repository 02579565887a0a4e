package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/ratelimit"
)

// One Guard for the calls to a payments service: at most 100 a second, a
// breaker that opens when half of the last calls failed, 300 ms per call,
// and a fallback that queues the charge when the call is refused.
func Example_quickStart() {
	limit, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(100), 20)
	if err != nil {
		panic(err)
	}
	payments, err := breaker.New("payments", breaker.WithErrorRatio(0.5, 20))
	if err != nil {
		panic(err)
	}
	later, err := degrade.New(degrade.OnRejected(degrade.Value("queued for later")))
	if err != nil {
		panic(err)
	}
	guard, err := sluice.New(sluice.With(limit, payments),
		sluice.WithTimeout(300*time.Millisecond), sluice.WithFallback(later))
	if err != nil {
		panic(err)
	}

	receipt, err := sluice.Execute(context.Background(), guard, func(ctx context.Context) (string, error) {
		return "charged", nil // call the payments service with ctx here
	})
	fmt.Println(receipt, err)

	payments.ForceOpen() // as if it had failed: the fallback answers
	receipt, err = sluice.Execute(context.Background(), guard, func(ctx context.Context) (string, error) {
		return "", errors.New("not called")
	})
	fmt.Println(receipt, err)

	// In front of HTTP handlers, a Guard of their own (a handler that calls
	// payments goes through both): 429 or 503 with Retry-After.
	inbound, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1000), 200)
	if err != nil {
		panic(err)
	}
	front, err := sluice.New(sluice.With(inbound))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	handler := sluicehttp.Middleware(sluicehttp.WithGuard(front))(mux)
	_ = handler // http.ListenAndServe(":8080", handler)
	// Output:
	// charged <nil>
	// queued for later <nil>
}
