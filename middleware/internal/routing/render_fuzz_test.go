package routing

import (
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware/internal/sfv"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

// sfName is name as appendSFString writes it, unquoted: printable ASCII
// kept, every other byte '?'.
func sfName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

// parseOne parses a field value as a structured List of one item.
func parseOne(t *testing.T, field string, h map[string][]string) sfv.Item {
	t.Helper()
	v := h[field]
	if len(v) != 1 {
		t.Fatalf("%s: %q, want one value", field, v)
	}
	items, err := sfv.ParseList(v[0])
	if err != nil || len(items) != 1 {
		t.Fatalf("%s %q: %v, %d items", field, v[0], err, len(items))
	}
	return items[0]
}

func intField(t *testing.T, field string, h map[string][]string) int64 {
	t.Helper()
	v := h[field]
	if len(v) != 1 {
		t.Fatalf("%s: %q, want one value", field, v)
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil {
		t.Fatalf("%s %q: %v", field, v[0], err)
	}
	return n
}

func wantParam(t *testing.T, it sfv.Item, key string, want int64) {
	t.Helper()
	got, ok := it.Int(key)
	if !ok || got != want {
		t.Fatalf("%q: %s = %d (%v), want %d", it.Value, key, got, ok, want)
	}
}

// FuzzRenderedFieldsParseBack renders decisions of any quota, remaining,
// reset and delay, admitted and rejected, through a route and without one,
// and reads every field back with the structured field parser: the numbers
// are the decision's, rounded up to whole seconds and clamped to what a
// structured integer holds, t equals Retry-After on a rejection, and the
// values shared between responses never leak one decision's numbers into
// another's.
func FuzzRenderedFieldsParseBack(f *testing.F) {
	f.Add("ratelimit/per-ip", int64(100), int64(0), int64(40*time.Second), int64(6200*time.Millisecond), int64(time.Minute), int64(3), true)
	f.Add(`odd"name\`, int64(10), int64(3), int64(1500*time.Millisecond), int64(0), int64(0), int64(-1), false)
	f.Add("\x00\xffé", int64(-5), int64(-1), int64(-1), int64(-1), int64(1), int64(1<<62), true)
	f.Add("n", int64(1<<62), int64(1<<62), int64(1<<62), int64(1<<62), int64(1<<62), int64(999_999_999_999_999), false)
	f.Add("long/"+string(make([]byte, 300)), int64(7), int64(6), int64(time.Nanosecond), int64(time.Second+1), int64(time.Second-1), int64(5), true)
	f.Fuzz(func(t *testing.T, name string, limit, remaining, reset, retry, window, remaining2 int64, legacy bool) {
		if name == "" {
			return
		}
		routes := []*Route{nil}
		// A Guard refuses a policy name that is not UTF-8; a decision of
		// another's, rendered without a route, may still carry one.
		if utf8.ValidString(name) {
			g, err := sluice.New(sluice.With(testpolicy.Window(name, time.Duration(window))))
			if err != nil {
				t.Fatal(err)
			}
			routes = append(routes, newRoute("GET /x", g))
		}
		for _, rt := range routes {
			w := int64(-1) // no w
			if rt != nil && window > 0 {
				w = sfInt(RetryAfterSeconds(time.Duration(window)))
			}
			r := Renderer{Legacy: legacy}
			// Twice each, and with another remaining in between, so that
			// the values kept per policy are read back as well.
			for _, rem := range []int64{remaining, remaining, remaining2, remaining} {
				d := sluice.Decision{Allowed: true, Policy: name, Limit: limit, Remaining: rem, Reset: time.Duration(reset)}
				h := map[string][]string{}
				r.Admitted(h, rt, d)
				check := func(h map[string][]string, tv int64) {
					t.Helper()
					if limit < 0 {
						if _, ok := h[FieldRateLimit]; ok {
							t.Fatalf("no quota, yet %v", h)
						}
						return
					}
					pol := parseOne(t, FieldRateLimitPolicy, h)
					if pol.Value != sfName(name) {
						t.Fatalf("policy %q, want %q", pol.Value, sfName(name))
					}
					wantParam(t, pol, "q", sfInt(limit))
					if got, ok := pol.Int("w"); (w >= 0) != ok || ok && got != w {
						t.Fatalf("w = %d (%v), want %d", got, ok, w)
					}
					rl := parseOne(t, FieldRateLimit, h)
					if rl.Value != sfName(name) {
						t.Fatalf("RateLimit %q, want %q", rl.Value, sfName(name))
					}
					wantParam(t, rl, "r", sfInt(rem))
					wantParam(t, rl, "t", tv)
					if legacy {
						if got := intField(t, FieldXRateLimitLimit, h); got != sfInt(limit) {
							t.Fatalf("X-RateLimit-Limit %d, want %d", got, sfInt(limit))
						}
						if got := intField(t, FieldXRateLimitRemaining, h); got != sfInt(rem) {
							t.Fatalf("X-RateLimit-Remaining %d, want %d", got, sfInt(rem))
						}
						if got := intField(t, FieldXRateLimitReset, h); got != tv {
							t.Fatalf("X-RateLimit-Reset %d, want %d", got, tv)
						}
					}
				}
				check(h, sfInt(RetryAfterSeconds(time.Duration(reset))))

				d.Allowed, d.RetryAfter, d.Cause = false, time.Duration(retry), sluice.ErrRateLimited
				h = map[string][]string{}
				if status := r.Rejected(h, rt, d, true); status != 429 {
					t.Fatalf("status %d", status)
				}
				ra := intField(t, FieldRetryAfter, h)
				if ra < 1 || retry > 0 && (time.Duration(ra)*time.Second < time.Duration(retry) ||
					time.Duration(ra-1)*time.Second >= time.Duration(retry)) {
					t.Fatalf("Retry-After %d for a delay of %v", ra, time.Duration(retry))
				}
				check(h, ra)
			}
		}
	})
}

// FuzzRetryAfterSeconds checks the rounding up to whole seconds: the
// smallest whole number of seconds not shorter than d, and monotone.
func FuzzRetryAfterSeconds(f *testing.F) {
	f.Add(int64(0), int64(1))
	f.Add(int64(time.Second), int64(time.Second+1))
	f.Add(int64(-1), int64(1<<63-1))
	f.Fuzz(func(t *testing.T, a, b int64) {
		da, db := time.Duration(min(a, b)), time.Duration(max(a, b))
		sa, sb := RetryAfterSeconds(da), RetryAfterSeconds(db)
		if sa > sb {
			t.Fatalf("RetryAfterSeconds(%v) = %d > RetryAfterSeconds(%v) = %d", da, sa, db, sb)
		}
		if da <= 0 {
			if sa != 0 {
				t.Fatalf("RetryAfterSeconds(%v) = %d", da, sa)
			}
			return
		}
		// In seconds and nanoseconds, so as not to overflow.
		if whole, frac := int64(da/time.Second), int64(da%time.Second); sa != whole+min(frac, 1) {
			t.Fatalf("RetryAfterSeconds(%v) = %d", da, sa)
		}
	})
}
