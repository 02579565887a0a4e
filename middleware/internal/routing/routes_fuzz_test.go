package routing

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

// FuzzRoutesMatch builds tables of any patterns, some mapped to nil, with
// and without a default, and checks Match: a listed pattern gets its own
// Route (nil when mapped to nil), any other string the default.
func FuzzRoutesMatch(f *testing.F) {
	f.Add("GET /items/{id}\n/pkg.Service/Method\nGET /", "GET /items/{id}", uint8(1), true)
	f.Add("a\na", "a", uint8(0), false)
	f.Add("GET /x/{\n/y/{id}", "/y/{id}", uint8(0), true)
	f.Add("\n/x", "", uint8(2), true)
	f.Add("GET /x\nget /x", "GET /x ", uint8(3), false)
	f.Fuzz(func(t *testing.T, list, query string, nilMask uint8, withDefault bool) {
		g, err := sluice.New(sluice.With(testpolicy.Window("p", time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		def, err := sluice.New(sluice.With(testpolicy.Window("d", 0)))
		if err != nil {
			t.Fatal(err)
		}
		patterns := strings.Split(list, "\n")
		var opts []RoutesOption
		seen := map[string]bool{}
		bad := false
		for i, p := range patterns {
			rg := g
			if nilMask>>(i%8)&1 != 0 {
				rg = nil
			}
			bad = bad || p == "" || seen[p] || checkPattern(p) != nil
			seen[p] = true
			opts = append(opts, RouteTo(p, rg))
		}
		if withDefault {
			opts = append(opts, DefaultRoute(def))
		}
		rs, err := NewRoutes(opts...)
		if (err != nil) != bad {
			t.Fatalf("NewRoutes(%q): %v", patterns, err)
		}
		if err != nil {
			return
		}
		for _, q := range append(patterns, query) {
			rt := rs.Match(q)
			i := -1
			for j, p := range patterns {
				if p == q {
					i = j
				}
			}
			switch {
			case i >= 0 && nilMask>>(i%8)&1 != 0:
				if rt != nil {
					t.Fatalf("Match(%q) = %+v, want nil", q, rt)
				}
			case i >= 0:
				if rt == nil || rt.Pattern != q || rt.Guard != g || rt.Window("p") != time.Second {
					t.Fatalf("Match(%q) = %+v", q, rt)
				}
			case withDefault:
				if rt == nil || rt.Pattern != "" || rt.Guard != def || rt.Window("d") != 0 {
					t.Fatalf("Match(%q) = %+v, want the default", q, rt)
				}
			default:
				if rt != nil {
					t.Fatalf("Match(%q) = %+v, want nil", q, rt)
				}
			}
		}
	})
}
