package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
)

// A Guard that retries a failed call, up to 3 attempts, with retries held
// to a tenth of its calls; each attempt is one call for the breaker.
func ExampleWithRetry() {
	payments, err := breaker.New("payments")
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(
		sluice.With(payments),
		sluice.WithRetry(sluice.Retry{Attempts: 3, Backoff: 20 * time.Millisecond, Budget: 0.1}),
	)
	if err != nil {
		panic(err)
	}
	defer g.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	tries := 0
	err = g.Do(ctx, func(ctx context.Context) error {
		tries++
		if tries == 1 {
			return errors.New("connection reset")
		}
		return nil
	})
	s := g.Stats()
	fmt.Println(err, tries, s.Attempts, s.Retries)
	// Output: <nil> 2 2 1
}
