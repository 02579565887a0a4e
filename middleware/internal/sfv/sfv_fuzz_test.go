package sfv

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// serialize writes items as RFC 8941 §4.1 does: every value as a string.
func serialize(items []Item) string {
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(it.Value)) // printable ASCII: Go's quoting is RFC 8941's
		keys := make([]string, 0, len(it.Params))
		for k := range it.Params {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b.WriteString(";" + k)
			switch v := it.Params[k].(type) {
			case bool:
				if !v {
					b.WriteString("=?0")
				}
			case int64:
				b.WriteString("=" + strconv.FormatInt(v, 10))
			case string:
				b.WriteString("=" + strconv.Quote(v))
			}
		}
	}
	return b.String()
}

// FuzzParseList checks that what parses holds only what RFC 8941 allows
// (printable ASCII strings, integers of at most 15 digits) and that it
// serialises and parses back to the same items.
func FuzzParseList(f *testing.F) {
	for _, s := range []string{
		`"per-ip";q=100;w=60, "b\"x";r=0;t=7, tok;f=?1`,
		`"a";q=999999999999999;r=-999999999999999`,
		`  *tok/a:b;k="v\\";b=?0 ,	x`,
		`"a";q=1000000000000000`, `"a";`, `"a" , `, `"\`, `?1`, `-`, `a;b=-`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		items, err := ParseList(s)
		if err != nil {
			return
		}
		for _, it := range items {
			for _, c := range []byte(it.Value) {
				if c < 0x20 || c > 0x7e {
					t.Fatalf("%q: value %q holds %#x", s, it.Value, c)
				}
			}
			for k, v := range it.Params {
				if n, ok := v.(int64); ok && (n > 999_999_999_999_999 || n < -999_999_999_999_999) {
					t.Fatalf("%q: %s = %d", s, k, n)
				}
				if str, ok := v.(string); ok && strings.ContainsFunc(str, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
					t.Fatalf("%q: %s = %q", s, k, str)
				}
			}
		}
		again, err := ParseList(serialize(items))
		if err != nil {
			t.Fatalf("%q serialised as %q: %v", s, serialize(items), err)
		}
		if serialize(again) != serialize(items) {
			t.Fatalf("%q: %q parses back as %q", s, serialize(items), serialize(again))
		}
	})
}
