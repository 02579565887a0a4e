package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
)

// newClient returns a client configured for limiters: no retries (a retried
// script would charge twice) and context deadlines honoured.
func newClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1, ContextTimeoutEnabled: true})
}

// A limit of 10 per minute per user, shared by every instance of the
// service, in a Guard.
func Example() {
	client := newClient()
	defer client.Close()
	limiter, err := redislimit.NewGCRA(client, ratelimit.PerMinute(10), 10,
		redislimit.WithName("example/api"), redislimit.WithLocalFallback(4))
	if err != nil {
		panic(err)
	}
	guard, err := sluice.New(sluice.With(limiter))
	if err != nil {
		panic(err)
	}
	defer guard.Close()
	ctx := sluice.WithKey(context.Background(), "user-1")
	for range 12 {
		err := guard.Do(ctx, func(context.Context) error { return nil })
		if errors.Is(err, sluice.ErrRateLimited) {
			fmt.Println("rate limited")
		}
	}
	// Output:
	// rate limited
	// rate limited
}

// Per-user and per-user-per-route limits decided in one round trip: a
// request rejected by one of them charges neither.
func ExampleAll() {
	client := newClient()
	defer client.Close()
	perUser, err := redislimit.NewGCRA(client, ratelimit.PerMinute(100), 100, redislimit.WithName("example/user"))
	if err != nil {
		panic(err)
	}
	perRoute, err := redislimit.NewFixedWindow(client, 2, time.Minute,
		redislimit.WithName("example/user-route"), redislimit.WithPerResource())
	if err != nil {
		panic(err)
	}
	both, err := redislimit.All([]*redislimit.Limiter{perUser, perRoute}, redislimit.WithName("example/both"))
	if err != nil {
		panic(err)
	}
	ctx := sluice.WithResource(sluice.WithKey(context.Background(), "user-2"), "/search")
	for range 3 {
		d := both.Decide(ctx)
		fmt.Println(d.Allowed, d.Limit, d.Remaining)
	}
	// Output:
	// true 2 1
	// true 2 0
	// false 2 0
}

// While Redis is unreachable, a FailClosed limiter rejects with a cause that
// adapters answer with 503.
func ExampleWithFailClosed() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, err := redislimit.NewGCRA(client, ratelimit.PerSecond(10), 10,
		redislimit.WithName("example/closed"), redislimit.WithFailClosed())
	if err != nil {
		panic(err)
	}
	d := limiter.Decide(context.Background())
	fmt.Println(d.Allowed, d.Policy, errors.Is(d.Cause, sluice.ErrCircuitOpen))
	// Output: false example/closed:closed true
}
