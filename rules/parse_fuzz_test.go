package rules

import (
	"testing"
)

// FuzzParse feeds the parser any bytes: it must answer rules or an error,
// never panic, and rules it accepts must name what they refer to.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		twoLimits,
		breakerRules,
		`{"guards": {"a": {"policies": [{"name": "a", "kind": "gcra", "rate": "1/s", "burst": 1}]}}, "default": "a"}`,
		"guards:\n  a:\n    key: {ip: {trusted_proxies: [10.0.0.0/8]}}\n    policies:\n      - {name: p, kind: sliding-window, limit: 5, window: 1s, per_key: true}\n",
		"guards:\n  a:\n    policies:\n      - {name: s, kind: shed, on: true}\nfallbacks:\n  - {cause: rejected, status: 503, body: x}\n",
		"guards: {a: {policies: [{name: b, kind: breaker, error_ratio: 0.5, min_requests: 10, window: 10s}]}}",
		"guards: {a: {policies: [{name: t, kind: throttle, multiplier: 1.5, window: 10s, buckets: 5}]}}",
		"guards: &a {x: *a}",
		"- [",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parse("rules.yaml", data)
		if err != nil {
			return
		}
		if len(s.guards) == 0 {
			t.Fatal("rules without a guard accepted")
		}
		for _, r := range s.routes {
			if _, ok := s.byName[r.guard]; !ok && r.guard != "none" {
				t.Fatalf("route %q to unknown guard %q accepted", r.pattern, r.guard)
			}
		}
		for _, p := range s.policies {
			if _, ok := kinds[p.kind]; !ok {
				t.Fatalf("unknown kind %q accepted", p.kind)
			}
		}
	})
}
