package sluicehttp

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// FuzzRetryAfter checks the Transport's reading of a dependency's
// Retry-After: whatever the field holds, a delay it returns is positive and
// within WithMaxRetryAfter; delay-seconds are read exactly (capped), however
// many digits they have, and a longer delay never gives a shorter hold; an
// HTTP-date in any of its three formats gives the time until it, and one in
// the past gives none.
func FuzzRetryAfter(f *testing.F) {
	f.Add("120", uint64(120), int64(120), int64(10*time.Minute), uint8(0))
	f.Add("Sun, 22 Nov 2026 05:01:00 GMT", uint64(0), int64(0), int64(0), uint8(1))
	f.Add(" 0007 ", uint64(1<<63), int64(-1), int64(time.Millisecond), uint8(2))
	f.Add("99999999999999999999999", uint64(1<<64-1), int64(1<<40), int64(1), uint8(3))
	f.Add("-5", uint64(9223372036), int64(9223372036), int64(1<<63-1), uint8(4))
	f.Add("Sunday, 22-Nov-26 05:01:00 GMT", uint64(599), int64(600), int64(time.Hour), uint8(5))
	f.Add("Sun Nov 22 05:01:00 2026", uint64(1), int64(1), int64(1500*time.Millisecond), uint8(6))
	f.Fuzz(func(t *testing.T, v string, n uint64, secs, maxNs int64, form uint8) {
		now := time.Date(2026, 11, 22, 5, 0, 0, 500_000_000, time.UTC)
		var opts []TransportOption
		limit := 10 * time.Minute
		if maxNs > 0 {
			limit = time.Duration(maxNs)
			opts = append(opts, WithMaxRetryAfter(limit))
		}
		rt, err := Transport(nil, func(string) (*sluice.Guard, error) { return nil, nil }, opts...)
		if err != nil {
			t.Fatal(err)
		}
		rt.cfg.wallNow = func() time.Time { return now }
		within := func(v string) time.Duration {
			t.Helper()
			d, ok := rt.retryAfter(v)
			if ok && (d <= 0 || d > limit) {
				t.Fatalf("retryAfter(%q) = %v with a cap of %v", v, d, limit)
			}
			if !ok && d != 0 {
				t.Fatalf("retryAfter(%q) = %v, false", v, d)
			}
			return d
		}
		within(v)

		// delay-seconds: n and n+1, as they come and with leading zeros or
		// many more digits.
		seconds := func(n uint64) time.Duration {
			if n == 0 {
				return 0
			}
			if n >= uint64(limit/time.Second)+1 {
				return limit
			}
			return min(time.Duration(n)*time.Second, limit)
		}
		prev := time.Duration(-1)
		for _, k := range []uint64{n, n + 1} {
			if k < n {
				continue // wrapped
			}
			s := strconv.FormatUint(k, 10)
			for _, text := range []string{s, "000" + s, " " + s + "\t"} {
				if got, want := within(text), seconds(k); got != want {
					t.Fatalf("retryAfter(%q) = %v, want %v", text, got, want)
				}
			}
			d := within(s)
			if d < prev {
				t.Fatalf("retryAfter(%d) = %v < retryAfter(%d) = %v", k, d, k-1, prev)
			}
			prev = d
		}
		if got := within(strconv.FormatUint(n, 10) + strings.Repeat("0", int(form%40))); n != 0 && got < seconds(n) {
			t.Fatalf("more digits, shorter delay: %v < %v", got, seconds(n))
		}

		// HTTP-date, whole seconds from a now half a second past one.
		secs %= 10 * 365 * 24 * 3600
		at := now.Truncate(time.Second).Add(time.Duration(secs) * time.Second)
		var text string
		switch form % 3 {
		case 0:
			text = at.Format(http.TimeFormat)
		case 1:
			text = at.Format(time.RFC850)
		default:
			text = at.Format(time.ANSIC)
		}
		want := at.Sub(now)
		if want <= 0 {
			want = 0
		}
		if got := within(text); got != min(want, limit) {
			t.Fatalf("retryAfter(%q) at %v = %v, want %v", text, now, got, min(want, limit))
		}
	})
}
