package dashboard

import (
	"fmt"
	"time"

	"github.com/sluice-go/sluice"

	"github.com/sluice-go/sluice/observe/dashboard/internal/redisnote"
)

func init() {
	redisnote.Record = func(d any, n redisnote.Note) { d.(*Dashboard).noteRedis(n) }
}

// redisSeen is what a Dashboard heard of a Redis limiter's failure policy
// (package redisdash). It is guarded by the Dashboard's mu.
type redisSeen struct {
	// limiter is the limiter heard of, a pointer: comparing it with any
	// policy cannot panic, as comparing two policies of a type that is not
	// comparable would.
	limiter   any
	decider   string    // "open", "closed" or "local": the failure policy
	decisions uint64    // made by the failure policy
	decided   time.Time // the last of them
	err       string    // Redis's last error
	errAt     time.Time
}

func (d *Dashboard) noteRedis(n redisnote.Note) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n.Limiter == nil || !d.holdsLocked(n.Limiter) {
		return // of no Guard shown: kept, it would outlive them all
	}
	r := d.redisOfLocked(n.Limiter)
	if r == nil {
		r = &redisSeen{limiter: n.Limiter}
		d.redis = append(d.redis, r)
	}
	if n.Decider != "" {
		r.decider, r.decided = n.Decider, n.At
		r.decisions++
	}
	if n.Err != nil {
		r.err, r.errAt = n.Err.Error(), n.At
	}
}

// describeRedis adds the failure policy of p, a Redis limiter, to its view
// pv, when its observer told d of it: which policy, how many decisions it
// made and when the last, and Redis's last error.
func (d *Dashboard) describeRedis(pv *policyView, p sluice.Policy, now time.Time) {
	d.mu.Lock()
	r := d.redisOfLocked(p)
	var seen redisSeen
	if r != nil {
		seen = *r
	}
	d.mu.Unlock()
	if r == nil {
		return
	}
	ago := func(t time.Time) string { return now.Sub(t).Truncate(time.Second).String() + " ago" }
	if seen.decisions > 0 {
		name := map[string]string{"open": "fail-open", "closed": "fail-closed", "local": "local fallback"}[seen.decider]
		if name == "" {
			name = seen.decider
		}
		pv.Details = append(pv.Details, detail{"failure policy",
			fmt.Sprintf("%s: %d decisions, the last %s", name, seen.decisions, ago(seen.decided))})
	}
	if seen.err != "" {
		pv.Details = append(pv.Details, detail{"last Redis error", seen.err + " (" + ago(seen.errAt) + ")"})
	}
}

// redisOfLocked returns what d heard of the Redis limiter p, or nil. d.mu
// is held.
func (d *Dashboard) redisOfLocked(p any) *redisSeen {
	for _, r := range d.redis {
		if r.limiter == p {
			return r
		}
	}
	return nil
}

// holdsLocked reports whether a Guard shown holds limiter, a Redis limiter
// heard of. d.mu is held.
func (d *Dashboard) holdsLocked(limiter any) bool {
	for _, w := range d.guards {
		for _, p := range w.policies {
			if limiter == p {
				return true
			}
		}
	}
	return false
}
