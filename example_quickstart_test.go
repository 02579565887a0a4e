package sluice_test

import (
	"context"
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
// and a fallback that puts a refused charge in an outbox, to be sent when
// payments is back.
func Example_quickStart() {
	limit, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(100), 20)
	if err != nil {
		panic(err)
	}
	payments, err := breaker.New("payments", breaker.WithErrorRatio(0.5, 20))
	if err != nil {
		panic(err)
	}
	// The order travels in the call's context; the fallback answers only
	// once the charge is safely in the outbox, and lets the refusal stand
	// when it cannot queue it.
	type orderKey struct{}
	outbox := make(chan string, 1000)
	later, err := degrade.New(degrade.OnRejected(func(ctx context.Context, err error) (string, error) {
		order, ok := ctx.Value(orderKey{}).(string)
		if !ok {
			return "", err
		}
		select {
		case outbox <- order:
			return "queued " + order, nil
		default:
			return "", err // the outbox is full
		}
	}))
	if err != nil {
		panic(err)
	}
	guard, err := sluice.New(sluice.With(limit, payments),
		sluice.WithTimeout(300*time.Millisecond), sluice.WithFallback(later))
	if err != nil {
		panic(err)
	}
	charge := func(order string) (string, error) {
		ctx := context.WithValue(context.Background(), orderKey{}, order)
		return sluice.Execute(ctx, guard, func(ctx context.Context) (string, error) {
			return "charged " + order, nil // call the payments service with ctx here
		})
	}

	fmt.Println(charge("order-1"))
	payments.ForceOpen() // as if it had failed: the fallback answers
	fmt.Println(charge("order-2"))
	fmt.Println(len(outbox), "in the outbox")

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
	mw, err := sluicehttp.Middleware(sluicehttp.WithGuard(front))
	if err != nil {
		panic(err)
	}
	handler := mw(mux)
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	_ = srv // srv.ListenAndServe()
	// Output:
	// charged order-1 <nil>
	// queued order-2 <nil>
	// 1 in the outbox
}
