package redislimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policytest"
	"github.com/sluice-go/sluice/internal/redistest"
)

// newServer starts a private redis-server for t and, when t ends and before
// the server stops, checks that every key the limiters wrote has a TTL.
func newServer(t *testing.T) *redistest.Server {
	t.Helper()
	s := redistest.Start(t)
	t.Cleanup(func() { checkTTLs(t, s) })
	return s
}

// checkTTLs fails t when a key under defaultPrefix on s has no TTL.
func checkTTLs(t *testing.T, s *redistest.Server) {
	t.Helper()
	cursor := "0"
	for {
		reply, err := s.Do("SCAN", cursor, "MATCH", defaultPrefix+":*", "COUNT", "1000")
		if err != nil {
			return // the test stopped the server
		}
		lines := strings.Split(reply, "\n")
		cursor = lines[0]
		for _, k := range lines[1:] {
			if k == "" {
				continue
			}
			pttl, err := s.Do("PTTL", k)
			require.NoError(t, err)
			n, err := strconv.ParseInt(pttl, 10, 64)
			require.NoError(t, err)
			require.True(t, n >= 0 || n == -2, "key %q has PTTL %d: every key must expire", k, n)
		}
		if cursor == "0" {
			return
		}
	}
}

// newClient returns a client of s configured as the package doc recommends,
// closed when t ends.
func newClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 32, ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var nameSeq atomic.Int64

// uniqueName returns a limiter name no other test uses.
func uniqueName(alg string) string {
	return fmt.Sprintf("test/%s/%d", alg, nameSeq.Add(1))
}

// algorithms builds each algorithm at the same capacity: quota units, one
// refilled every interval (the windows are quota × interval long).
var algorithms = []struct {
	name string
	make func(c redis.UniversalClient, quota int64, interval time.Duration, opts ...Option) (*Limiter, error)
}{
	{"gcra", func(c redis.UniversalClient, q int64, iv time.Duration, opts ...Option) (*Limiter, error) {
		return NewGCRA(c, rateOf(iv), q, opts...)
	}},
	{"token-bucket", func(c redis.UniversalClient, q int64, iv time.Duration, opts ...Option) (*Limiter, error) {
		return NewTokenBucket(c, rateOf(iv), q, opts...)
	}},
	{"fixed-window", func(c redis.UniversalClient, q int64, iv time.Duration, opts ...Option) (*Limiter, error) {
		return NewFixedWindow(c, q, time.Duration(q)*iv, opts...)
	}},
	{"sliding-window-weighted", func(c redis.UniversalClient, q int64, iv time.Duration, opts ...Option) (*Limiter, error) {
		return NewSlidingWindowWeighted(c, q, time.Duration(q)*iv, opts...)
	}},
	{"sliding-window", func(c redis.UniversalClient, q int64, iv time.Duration, opts ...Option) (*Limiter, error) {
		return NewSlidingWindow(c, q, time.Duration(q)*iv, ringOf(time.Duration(q)*iv), opts...)
	}},
}

// ringOf is the number of buckets the tests give a NewSlidingWindow of
// window: the most of a few that divide it into whole microseconds.
func ringOf(window time.Duration) int {
	for _, b := range []int{10, 8, 6, 5, 4, 3, 2} {
		if window%(time.Duration(b)*time.Microsecond) == 0 {
			return b
		}
	}
	return 1
}

// admitD asks p as a Guard does, and returns its answer as a Decision and
// its Ticket. A Limiter's Decision names, with a suffix (":open", ":closed",
// ":local"), the failure policy that decided, which its Admit answer does not
// carry: the tests read it to know who decided.
func admitD(p sluice.Policy, ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	if l, ok := p.(*Limiter); ok {
		return l.admit(ctx, now)
	}
	return policytest.Admit(ctx, p, now)
}
