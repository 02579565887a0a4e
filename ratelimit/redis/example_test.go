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

// A limit of 10 per minute per user, shared by every instance of the
// service, in a Guard.
func Example() {
	// ContextTimeoutEnabled makes go-redis honour the limiter's short
	// deadlines; the constructors refuse a client without it. MaxRetries can
	// stay as it is: a limiter's script is never sent twice. (redisAddr is the
	// address of the test's Redis.)
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, err := redislimit.NewGCRA(client, ratelimit.Rate{Count: 10, Period: time.Minute}, 10,
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
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	perUser, err := redislimit.NewGCRA(client, ratelimit.Rate{Count: 100, Period: time.Minute}, 100, redislimit.WithName("example/user"))
	if err != nil {
		panic(err)
	}
	perRoute, err := redislimit.NewFixedWindow(client, 2, time.Minute,
		redislimit.WithName("example/user-route"), redislimit.WithPerResource())
	if err != nil {
		panic(err)
	}
	// A second for Redis to answer, not the default 50 ms: the first call
	// also dials and loads the script.
	both, err := redislimit.All([]*redislimit.Limiter{perUser, perRoute}, redislimit.WithName("example/both"),
		redislimit.WithTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(both))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	ctx := sluice.WithResource(sluice.WithKey(context.Background(), "user-2"), "/search")
	for range 3 {
		var call sluice.Call
		err := g.Begin(ctx, &call)
		d := call.Decision()
		fmt.Println(d.Allowed, d.Limit, d.Remaining)
		_ = call.End(err)
	}
	// Output:
	// true 2 1
	// true 2 0
	// false 2 0
}

// While Redis is unreachable, a limiter built WithFailClosed rejects with
// ErrUnavailable, a cause that adapters answer with 503.
func ExampleWithFailClosed() {
	// Nothing listens on port 1: Redis is unreachable.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, err := redislimit.NewGCRA(client, ratelimit.PerSecond(10), 10,
		redislimit.WithName("example/closed"), redislimit.WithFailClosed())
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(limiter))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	err = g.Do(context.Background(), func(context.Context) error { return nil })
	d, rejected := sluice.RejectionOf(err)
	fmt.Println(!rejected, d.Policy, errors.Is(err, redislimit.ErrUnavailable))
	// Output: false example/closed true
}
