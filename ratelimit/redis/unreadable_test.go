package redislimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// unreadable are stored states the scripts cannot read, by algorithm: a
// hash without a field (an older layout), a field that is not a number
// (nan, inf and numbers past 2^53 among them), a key of another type. Each
// limiter has a quota of 3 an hour.
var unreadable = []struct {
	name string
	make func(c redis.UniversalClient, opts ...Option) (*Limiter, error)
	bad  []string // the command that writes the state, "k" its key
}{
	{"token-bucket/no-l", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewTokenBucket(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 3, o...)
	}, []string{"HSET", "k", "k", "1"}},
	{"token-bucket/nan", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewTokenBucket(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 3, o...)
	}, []string{"HSET", "k", "k", "x", "l", "1"}},
	{"token-bucket/string", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewTokenBucket(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 3, o...)
	}, []string{"SET", "k", "1"}},
	{"fixed-window/no-n", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewFixedWindow(c, 3, time.Hour, o...)
	}, []string{"HSET", "k", "w", "99999999999"}},
	{"fixed-window/list", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewFixedWindow(c, 3, time.Hour, o...)
	}, []string{"RPUSH", "k", "1"}},
	{"weighted/nan", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewSlidingWindowWeighted(c, 3, time.Hour, o...)
	}, []string{"HSET", "k", "w", "1", "c", "x", "p", "0"}},
	{"gcra/hash", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 3, o...)
	}, []string{"HSET", "k", "tat", "1"}},
	{"ring/hash", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewSlidingWindow(c, 3, time.Hour, 4, o...)
	}, []string{"HSET", "k", "w", "1"}},
	// Numbers Lua's tonumber takes that are none: nan, inf, past 2^53.
	{"gcra/nan", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 3, o...)
	}, []string{"SET", "k", "nan"}},
	{"gcra/inf", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewGCRA(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 3, o...)
	}, []string{"SET", "k", "inf"}},
	{"token-bucket/nan", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewTokenBucket(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 3, o...)
	}, []string{"HSET", "k", "k", "nan", "l", "1"}},
	{"fixed-window/huge", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewFixedWindow(c, 3, time.Hour, o...)
	}, []string{"HSET", "k", "w", "1e300", "n", "0"}},
	{"weighted/inf", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewSlidingWindowWeighted(c, 3, time.Hour, o...)
	}, []string{"HSET", "k", "w", "1", "c", "inf", "p", "0"}},
	{"ring/huge", func(c redis.UniversalClient, o ...Option) (*Limiter, error) {
		return NewSlidingWindow(c, 3, time.Hour, 4, o...)
	}, []string{"SET", "k", "99999999999999999999 3 3 3 3"}},
}

// A key whose stored state a script cannot read is read as one with none,
// and written afresh: it is limited as any other (3 of 10 admitted), and
// it is no failure of Redis, whose breaker would otherwise open for every
// key (here each of its requests would be one, and fail-closed, Alice's
// would be refused too). Through the script of one limit, and the one of
// several (All).
func TestUnreadableStateReadsAsNone(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	for _, tc := range unreadable {
		for _, all := range []bool{false, true} {
			name := tc.name
			if all {
				name += "/all"
			}
			t.Run(name, func(t *testing.T) {
				l, err := tc.make(c, WithName(uniqueName("unreadable")), WithFailClosed(), WithTimeout(5*time.Second),
					WithBreaker(defaultBreakerFailures, time.Hour))
				require.NoError(t, err)
				p := l
				if all {
					other, err := NewFixedWindow(c, 100, time.Hour, WithName(uniqueName("unreadable-other")))
					require.NoError(t, err)
					p, err = All([]*Limiter{l, other}, WithName(uniqueName("unreadable-all")),
						WithTimeout(5*time.Second), WithBreaker(defaultBreakerFailures, time.Hour))
					require.NoError(t, err)
				}
				mallory := sluice.WithKey(context.Background(), "mallory")
				k, _ := l.limits[0].key(mallory)
				cmd := append([]string{tc.bad[0], k}, tc.bad[2:]...)
				_, err = s.Do(cmd...)
				require.NoError(t, err)
				t.Cleanup(func() { _, _ = s.Do("DEL", k) })

				allowed := 0
				for range 10 {
					d, tk := admitD(p, mallory, 0)
					require.Equal(t, p.Name(), d.Policy, "decided by Redis, not the failure policy: %+v", d)
					if d.Allowed {
						allowed++
					}
					p.Done(tk, sluice.Success, 0, 0)
				}
				assert.Equal(t, 3, allowed)
				d, tk := admitD(p, sluice.WithKey(context.Background(), "alice"), 0)
				p.Done(tk, sluice.Success, 0, 0)
				assert.Equal(t, p.Name(), d.Policy, "Redis decides Alice's: %+v", d)
				assert.True(t, d.Allowed)
			})
		}
	}
}
