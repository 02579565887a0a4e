package redislimit

import (
	"context"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// fuzzKeyLimit builds a GCRA limit named as given, without Redis: building
// one never connects.
func fuzzKeyLimit(t *testing.T, prefix, name string, perResource bool) (*limit, bool) {
	t.Helper()
	c := newClient(t, "127.0.0.1:1")
	opts := []Option{WithPrefix(prefix), WithName(name)}
	if perResource {
		opts = append(opts, WithPerResource())
	}
	l, err := NewGCRA(c, ratelimit.Every(time.Second), 5, opts...)
	if err != nil {
		return nil, false
	}
	return l.limits[0], true
}

// FuzzRedisKeys checks the limiters' Redis keys: two limiters of different
// prefixes or names never share a key, nor two user keys or resources;
// every key has one hash tag, at its end, holding the hash of the user key
// alone, so no name, prefix or key can steer the Cluster slot; and the keys
// kept per user key are the ones built afresh.
func FuzzRedisKeys(f *testing.F) {
	f.Add("sluice", "a:b", "sluice:a", "b", "user", "user", "GET /x", "GET /x", false)
	f.Add("a:b", "c", "a", "b:c", "u", "v", "", "", true)
	f.Add("p", "n%3Ax", "p", "n:x", "{tag}", "}{", "r", "r2", true)
	f.Add("p%", "25", "p", "%25", "", "", "{r}", "{r}", false)
	f.Add("{a}", "b", "a", "{b}", "x", "x", "", "", false)
	f.Fuzz(func(t *testing.T, prefixA, nameA, prefixB, nameB, userA, userB, resA, resB string, perResource bool) {
		a, okA := fuzzKeyLimit(t, prefixA, nameA, perResource)
		b, okB := fuzzKeyLimit(t, prefixB, nameB, perResource)
		if okA != (prefixA != "" && nameA != "" && !strings.ContainsAny(prefixA+nameA, "{}")) {
			t.Fatalf("prefix %q, name %q: built %v", prefixA, nameA, okA)
		}
		if !okA || !okB {
			return
		}
		if (a.keyPre == b.keyPre) != (prefixA == prefixB && nameA == nameB) {
			t.Fatalf("prefix %q name %q and prefix %q name %q: keys start %q and %q", prefixA, nameA, prefixB, nameB, a.keyPre, b.keyPre)
		}
		ctxA := sluice.WithKey(sluice.WithResource(context.Background(), resA), userA)
		ctxB := sluice.WithKey(sluice.WithResource(context.Background(), resB), userB)
		for _, tc := range []struct {
			m    *limit
			ctx  context.Context
			user string
		}{{a, ctxA, userA}, {a, ctxB, userB}, {b, ctxA, userA}, {b, ctxB, userB}} {
			key, tag := tc.m.key(tc.ctx)
			open, end := strings.IndexByte(key, '{'), strings.IndexByte(key, '}')
			if strings.Count(key, "{") != 1 || strings.Count(key, "}") != 1 || end != len(key)-1 || open > end {
				t.Fatalf("key %q: not one hash tag at its end", key)
			}
			h := hashKey(tc.user)
			if key[open+1:end] != hex.EncodeToString(h[:]) {
				t.Fatalf("key %q: hash tag is not the user key's hash", key)
			}
			if !strings.HasPrefix(key, tc.m.keyPre) {
				t.Fatalf("key %q does not start with %q", key, tc.m.keyPre)
			}
			if again, tag2 := tc.m.buildKey(tc.ctx, tc.user); again != key || tag2 != tag {
				t.Fatalf("key %q kept, %q built", key, again)
			}
		}
		ka, _ := a.key(ctxA)
		kb, _ := a.key(ctxB)
		same := userA == userB && (!perResource || resA == resB)
		if (ka == kb) != same {
			t.Fatalf("user %q resource %q and user %q resource %q: keys %q and %q", userA, resA, userB, resB, ka, kb)
		}
	})
}

// FuzzParseReply feeds replies of any text: one that parses holds exactly
// five integers per limit, each read as strconv reads it (no wrapping past
// int64), and decisions that keep their invariants.
func FuzzParseReply(f *testing.F) {
	f.Add("1 9 100000 0 1700000000000000", uint8(1))
	f.Add("0 0 99 12 1 1 3 4 0 5", uint8(2))
	f.Add("0 -1 -5 -7 0", uint8(1))
	f.Add("1 2 3 4 5 6", uint8(1))
	f.Add("1 2 3 4 5x", uint8(1))
	f.Add("1-2 3 4 5", uint8(1))
	f.Add("1 99999999999999999999 3 4 5", uint8(1))
	f.Add("0 0 0 -9223372036854775808 9223372036854775807", uint8(1))
	f.Add("  1 2 3 4 5  ", uint8(1))
	f.Fuzz(func(t *testing.T, s string, n uint8) {
		n = max(n%3, 1)
		ds := make([]sluice.Decision, n)
		marks := make([]int64, n)
		if err := parseReply(s, ds, marks); err != nil {
			return
		}
		fields := strings.Fields(s)
		if strings.ContainsAny(s, "\t\n\v\f\r\u0085\u00a0") || len(fields) != 5*int(n) {
			t.Fatalf("%q read as %d limits", s, n)
		}
		for i := range ds {
			var v [5]int64
			for j := range v {
				x, err := strconv.ParseInt(fields[5*i+j], 10, 64)
				if err != nil {
					t.Fatalf("%q: field %q read as a number", s, fields[5*i+j])
				}
				v[j] = x
			}
			d := ds[i]
			want := sluice.Decision{Allowed: v[0] == 1, Remaining: max(v[1], 0), Reset: micros(v[2])}
			if !want.Allowed {
				want.RetryAfter, want.Cause = max(micros(v[3]), time.Microsecond), sluice.ErrRateLimited
			}
			if d != want || marks[i] != v[4] {
				t.Fatalf("%q: limit %d read as %+v mark %d, want %+v mark %d", s, i, d, marks[i], want, v[4])
			}
			if d.Remaining < 0 || d.Reset < 0 || !d.Allowed && d.RetryAfter <= 0 {
				t.Fatalf("%q: %+v", s, d)
			}
		}
	})
}
