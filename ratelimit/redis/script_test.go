package redislimit

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The script of one limit's admission decides as the general script does:
// the same admissions and Remaining over a run of mixed costs, and Reset and
// RetryAfter within 1s of each other (nothing refills or turns during the
// run, so they differ by the microseconds between the two calls).
// TestSingleScriptsFromStoredState covers refills, turned windows and
// stored instants ahead of Redis's clock.
func TestSingleScriptsDecideAsTheGeneralOne(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	ctx := t.Context()
	// Periods long enough that nothing refills or turns during the run.
	periods := map[byte]int64{'g': 1e10, 't': 1e10, 'f': 1e11, 's': 1e11}
	for alg, script := range singleScripts {
		t.Run(string(alg), func(t *testing.T) {
			a, b := strconv.FormatInt(periods[alg], 10), "10"
			one, all := uniqueName("one"), uniqueName("all")
			for i := range 16 {
				cost := strconv.Itoa(1 + i%3)
				r1, err := script.Run(ctx, c, []string{one}, a, b, cost).Text()
				if err != nil {
					t.Fatal(err)
				}
				r2, err := decideScript.Run(ctx, c, []string{all}, "a", string(alg), a, b, cost, 0).Text()
				if err != nil {
					t.Fatal(err)
				}
				v1, v2 := replyInts(t, r1), replyInts(t, r2)
				if v1[0] != v2[0] || v1[1] != v2[1] {
					t.Fatalf("call %d (cost %s): one-limit script %q, general script %q", i, cost, r1, r2)
				}
				for k := 2; k < 4; k++ {
					if d := v1[k] - v2[k]; d < -1e6 || d > 1e6 {
						t.Fatalf("call %d (cost %s): one-limit script %q, general script %q", i, cost, r1, r2)
					}
				}
			}
			for _, k := range []string{one, all} {
				if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 {
					t.Errorf("key %s has PTTL %v", k, ttl)
				}
			}
		})
	}
}

func replyInts(t *testing.T, s string) [5]int64 {
	t.Helper()
	f := strings.Fields(s)
	if len(f) != 5 {
		t.Fatalf("reply %q: want five integers", s)
	}
	var v [5]int64
	for i, x := range f {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			t.Fatalf("reply %q: %v", s, err)
		}
		v[i] = n
	}
	return v
}

// From the same stored state, the one-limit script and the general one
// answer alike and leave alike: tokens refilled since the last request, a
// previous window that still weighs, a theoretical arrival time or a last
// refill ahead of Redis's clock (a failover to a host whose clock lags),
// a window index ahead of it.
func TestSingleScriptsFromStoredState(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	ctx := t.Context()
	tm, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	now := tm.UnixMicro()
	cases := storedStates(ctx, c, now)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			one, all := uniqueName("one"), uniqueName("all")
			for _, k := range []string{one, all} {
				if err := tc.state(k); err != nil {
					t.Fatal(err)
				}
				if err := c.PExpire(ctx, k, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}
			a, b, cost := strconv.FormatInt(tc.a, 10), strconv.FormatInt(tc.b, 10), strconv.FormatInt(tc.cost, 10)
			// Each pair of calls decides a moment apart, and each key keeps
			// the instant of its last call: their answers differ by as much
			// as the calls so far took, at least 10 ms.
			began := time.Now()
			for i := range 3 {
				r1, err := singleScripts[tc.alg].Run(ctx, c, []string{one}, a, b, cost).Text()
				if err != nil {
					t.Fatal(err)
				}
				r2, err := decideScript.Run(ctx, c, []string{all}, "a", string(tc.alg), a, b, cost, 0).Text()
				if err != nil {
					t.Fatal(err)
				}
				v1, v2 := replyInts(t, r1), replyInts(t, r2)
				// Remaining may step by one where a weighted window's count
				// crosses a whole unit between the two calls.
				if v1[0] != v2[0] || v1[1]-v2[1] > 1 || v2[1]-v1[1] > 1 {
					t.Fatalf("call %d: one-limit script %q, general script %q", i, r1, r2)
				}
				within := max(10*time.Millisecond, time.Since(began)).Microseconds()
				for k := 2; k < 4; k++ {
					if d := v1[k] - v2[k]; d < -within || d > within {
						t.Fatalf("call %d: one-limit script %q, general script %q", i, r1, r2)
					}
				}
			}
			if tc.alg == 'g' {
				tat1, _ := c.Get(ctx, one).Int64()
				tat2, _ := c.Get(ctx, all).Int64()
				if d := tat1 - tat2; d < -10_000 || d > 10_000 {
					t.Fatalf("stored TAT %d and %d", tat1, tat2)
				}
				if tat1 < now+5*sec {
					t.Fatalf("stored TAT %d moved back from %d", tat1, now+5*sec)
				}
				return
			}
			h1, h2 := c.HGetAll(ctx, one).Val(), c.HGetAll(ctx, all).Val()
			for f, v := range h2 {
				n1, _ := strconv.ParseInt(h1[f], 10, 64)
				n2, _ := strconv.ParseInt(v, 10, 64)
				if d := n1 - n2; d < -10_000 || d > 10_000 {
					t.Fatalf("field %s: one-limit script left %q, general script %q", f, h1[f], v)
				}
			}
		})
	}
}

// storedState is a state of one limit's key that a script starts from: the
// algorithm, its period parameter (µs) and quota, a request's cost, and how
// the key is set up, relative to Redis's clock at now (µs).
type storedState struct {
	name  string
	alg   byte
	a, b  int64
	cost  int64
	state func(key string) error
}

const sec = int64(1e6)

// storedStates are the states TestSingleScriptsFromStoredState and
// TestBatchScriptsDecideAsSingleOnes start from: tokens refilled since the
// last request, a previous window that still weighs, a theoretical arrival
// time or a last refill ahead of Redis's clock (a failover to a host whose
// clock lags), a window index ahead of it.
func storedStates(ctx context.Context, c *redis.Client, now int64) []storedState {
	type state = map[string]any
	return []storedState{
		{"gcra/ahead", 'g', sec, 10, 1, func(k string) error { return c.Set(ctx, k, now+5*sec, 0).Err() }},
		{"gcra/far-ahead", 'g', sec, 10, 2, func(k string) error { return c.Set(ctx, k, now+20*sec, 0).Err() }},
		{"token/refill", 't', sec, 10, 2, func(k string) error {
			return c.HSet(ctx, k, state{"k": 3, "l": now - 2*sec - sec/2}).Err()
		}},
		{"token/full", 't', sec, 10, 1, func(k string) error {
			return c.HSet(ctx, k, state{"k": 9, "l": now - 30*sec}).Err()
		}},
		{"token/last-ahead", 't', sec, 10, 4, func(k string) error {
			return c.HSet(ctx, k, state{"k": 2, "l": now + 5*sec}).Err()
		}},
		{"fixed/index-ahead", 'f', 100 * sec, 10, 1, func(k string) error {
			return c.HSet(ctx, k, state{"w": now/(100*sec) + 1, "n": 6}).Err()
		}},
		{"fixed/old-window", 'f', 100 * sec, 10, 3, func(k string) error {
			return c.HSet(ctx, k, state{"w": now/(100*sec) - 1, "n": 9}).Err()
		}},
		{"sliding/previous-weighs", 's', 100 * sec, 10, 1, func(k string) error {
			return c.HSet(ctx, k, state{"w": now/(100*sec) - 1, "c": 7, "p": 2}).Err()
		}},
		{"sliding/both", 's', 100 * sec, 10, 2, func(k string) error {
			return c.HSet(ctx, k, state{"w": now / (100 * sec), "c": 2, "p": 9}).Err()
		}},
		{"sliding/index-ahead", 's', 100 * sec, 10, 1, func(k string) error {
			return c.HSet(ctx, k, state{"w": now/(100*sec) + 1, "c": 4, "p": 5}).Err()
		}},
	}
}
