package routing

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

// BenchmarkAdmitted measures the fields of an admitted request's Decision.
// "unchanged": the same r and t as the response before, so the RateLimit
// value made then is shared (a limit well above the traffic). "changing":
// every response has a new r, so each makes its value in a slab.
func BenchmarkAdmitted(b *testing.B) {
	d := sluice.Decision{Allowed: true, Policy: "ratelimit/api", Limit: 1000, Remaining: 999, Reset: time.Second}
	g, err := sluice.New(sluice.With(testpolicy.Window(d.Policy, time.Second)))
	if err != nil {
		b.Fatal(err)
	}
	rt := newRoute("", g)
	h := map[string][]string{}
	var r Renderer
	b.Run("unchanged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.Admitted(h, rt, d)
		}
	})
	b.Run("changing", func(b *testing.B) {
		b.ReportAllocs()
		d := d
		for b.Loop() {
			d.Remaining = (d.Remaining + 1) % 1000
			r.Admitted(h, rt, d)
		}
	})
}
