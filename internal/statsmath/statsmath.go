// Package statsmath adds and subtracts sluice.Stats counts, for the
// observers that follow a Guard across its rebuilds (otelmetrics, the
// dashboard): what a Guard carries from the one before it is left out of
// that one's counts, and the rest added to its own.
package statsmath

import (
	"time"

	"github.com/sluice-go/sluice"
)

// LeaveOut takes c's counts out of s, none below 0.
func LeaveOut(s, c *sluice.Stats) {
	each(s, c, func(a *uint64, b uint64) { *a -= min(*a, b) }, func(a *time.Duration, b time.Duration) { *a -= min(*a, b) })
}

// Add adds c's counts to s.
func Add(s, c *sluice.Stats) {
	each(s, c, func(a *uint64, b uint64) { *a += b }, func(a *time.Duration, b time.Duration) { *a += b })
}

// each applies op to every count of s and its like in c, and fop to the
// histograms' sums. The policies are paired by place when both chains name
// the same policies in the same order; otherwise by name, each policy of s
// with the one of c of its name when both chains have one of that name
// (a reload that added or removed a policy keeps the others' counts).
func each(s, c *sluice.Stats, op func(*uint64, uint64), fop func(*time.Duration, time.Duration)) {
	same := len(s.Policies) == len(c.Policies)
	for i := 0; same && i < len(s.Policies); i++ {
		same = s.Policies[i].Policy == c.Policies[i].Policy
	}
	for i := range s.Policies {
		j := i
		if !same {
			j = only(c.Policies, s.Policies[i].Policy)
			if j < 0 || only(s.Policies, s.Policies[i].Policy) != i {
				continue
			}
		}
		p, q := &s.Policies[i], &c.Policies[j]
		op(&p.Admitted, q.Admitted)
		op(&p.ShadowRejected, q.ShadowRejected)
		for j := range p.Rejected {
			op(&p.Rejected[j], q.Rejected[j])
		}
		for j := range p.Outcomes {
			op(&p.Outcomes[j], q.Outcomes[j])
		}
	}
	for j := range s.Fallbacks {
		op(&s.Fallbacks[j], c.Fallbacks[j])
	}
	op(&s.Attempts, c.Attempts)
	op(&s.Retries, c.Retries)
	op(&s.BudgetRefusals, c.BudgetRefusals)
	hist := func(h, k *sluice.Histogram) {
		for j := range h.Counts {
			op(&h.Counts[j], k.Counts[j])
		}
		fop(&h.Sum, k.Sum)
	}
	for j := range s.Durations {
		hist(&s.Durations[j], &c.Durations[j])
	}
	hist(&s.Timeouts, &c.Timeouts)
}

// only returns the index of the one policy of ps named name; -1 when none
// or more than one is.
func only(ps []sluice.PolicyStats, name string) int {
	at := -1
	for i := range ps {
		if ps[i].Policy == name {
			if at >= 0 {
				return -1
			}
			at = i
		}
	}
	return at
}
