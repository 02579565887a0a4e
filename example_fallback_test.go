package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
)

// A Guard whose fallbacks answer by cause: sluice.Execute returns the
// fallback's value, and the OnFallback observer learns which one served and
// why.
func ExampleWithFallback() {
	fallbacks, err := degrade.New(
		degrade.OnTimeout(degrade.Value("partial results")),
		degrade.OnError(degrade.Value("no results")),
	)
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(
		sluice.WithFallback(fallbacks),
		sluice.OnFallback(func(ctx context.Context, ev sluice.FallbackEvent) {
			fmt.Printf("fallback %q served (cause %s): %v\n", ev.Fallback, ev.Cause, ev.Err)
		}),
	)
	if err != nil {
		panic(err)
	}
	v, err := sluice.Execute(context.Background(), g, func(ctx context.Context) (string, error) {
		return "", errors.New("search: index unavailable")
	})
	fmt.Println(v, err)
	// Output:
	// fallback "error" served (cause none): search: index unavailable
	// no results <nil>
}

// A Guard with a call timeout: the call's context is cancelled at the
// deadline, and the error matches both sluice.ErrTimeout and
// context.DeadlineExceeded.
func ExampleWithTimeout() {
	g, err := sluice.New(sluice.WithTimeout(20 * time.Millisecond))
	if err != nil {
		panic(err)
	}
	err = g.Do(context.Background(), func(ctx context.Context) error {
		<-ctx.Done() // a slow dependency that honours its context
		return ctx.Err()
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, sluice.ErrTimeout), errors.Is(err, context.DeadlineExceeded), sluice.CauseOf(err))
	// Output:
	// sluice: timeout after 20ms
	// true true timeout
}
