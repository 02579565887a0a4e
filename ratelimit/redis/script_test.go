package redislimit

import (
	"strconv"
	"strings"
	"testing"
)

// The script of one limit's admission decides as the general script does:
// the same admissions and Remaining over a run of mixed costs, and Reset and
// RetryAfter within the microseconds between the two calls.
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
				r2, err := decideScript.Run(ctx, c, []string{all}, "a", string(alg), a, b, cost).Text()
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

func replyInts(t *testing.T, s string) [4]int64 {
	t.Helper()
	f := strings.Fields(s)
	if len(f) != 4 {
		t.Fatalf("reply %q: want four integers", s)
	}
	var v [4]int64
	for i, x := range f {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			t.Fatalf("reply %q: %v", s, err)
		}
		v[i] = n
	}
	return v
}
