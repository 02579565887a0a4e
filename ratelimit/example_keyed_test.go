package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

func ExampleNewKeyed() {
	// Two requests a second per client, for up to 50,000 clients at once;
	// a client idle for a minute is forgotten.
	perClient, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewFixedWindow(2, time.Second)
	},
		ratelimit.WithMaxKeys(50_000),
		ratelimit.WithIdleTTL(time.Minute),
		ratelimit.RequireKey(),
		ratelimit.WithName("ratelimit/per-client"),
	)
	if err != nil {
		panic(err)
	}
	clock := sluice.NewManualClock(0)
	g, err := sluice.New(sluice.With(perClient), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer g.Close()

	call := func(ctx context.Context) string {
		err := g.Do(ctx, func(context.Context) error { return nil })
		if err != nil {
			d, ok := sluice.RejectionOf(err)
			if !ok {
				return err.Error() // the call's own error
			}
			return fmt.Sprintf("rejected by %s, retry after %v", d.Policy, d.RetryAfter)
		}
		return "ok"
	}
	alice := sluice.WithKey(context.Background(), "alice")
	bob := sluice.WithKey(context.Background(), "bob")
	clock.Set(400 * time.Millisecond)
	fmt.Println(call(alice), call(alice))
	fmt.Println(call(alice))
	fmt.Println(call(bob))
	fmt.Println(errors.Is(g.Do(context.Background(), func(context.Context) error { return nil }), ratelimit.ErrNoKey))
	fmt.Println(perClient.Len(), "clients")
	// Output:
	// ok ok
	// rejected by ratelimit/per-client, retry after 600ms
	// ok
	// true
	// 2 clients
}
