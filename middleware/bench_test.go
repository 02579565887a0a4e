package middleware

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// BenchmarkAdmitted measures the fields of an admitted request's Decision:
// one allocation for both values.
func BenchmarkAdmitted(b *testing.B) {
	d := sluice.Decision{Allowed: true, Policy: "ratelimit/api", Limit: 1000, Remaining: 999, Reset: time.Second}
	g, err := sluice.New(sluice.With(windowed{name: d.Policy, w: time.Second}))
	if err != nil {
		b.Fatal(err)
	}
	rt := newRoute("", g)
	h := map[string][]string{}
	var r Renderer
	b.ReportAllocs()
	for b.Loop() {
		r.Admitted(h, rt, d)
	}
}
