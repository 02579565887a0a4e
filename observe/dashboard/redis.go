package dashboard

import (
	"fmt"
	"time"

	"github.com/sluice-go/sluice/observe/dashboard/internal/redisnote"
)

func init() {
	redisnote.Record = func(d any, n redisnote.Note) { d.(*Dashboard).noteRedis(n) }
}

// redisSeen is what a Dashboard heard of a Redis limiter's failure policy
// (package redisdash). It is guarded by the Dashboard's mu.
type redisSeen struct {
	decider   string    // "open", "closed" or "local": the failure policy
	decisions uint64    // made by the failure policy
	decided   time.Time // the last of them
	err       string    // Redis's last error
	errAt     time.Time
}

func (d *Dashboard) noteRedis(n redisnote.Note) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.showsLocked(n.Policy) {
		return // of no Guard shown: kept, it would outlive them all
	}
	if d.redis == nil {
		d.redis = map[string]*redisSeen{}
	}
	r := d.redis[n.Policy]
	if r == nil {
		r = &redisSeen{}
		d.redis[n.Policy] = r
	}
	if n.Decider != "" {
		r.decider, r.decided = n.Decider, n.At
		r.decisions++
	}
	if n.Err != nil {
		r.err, r.errAt = n.Err.Error(), n.At
	}
}

// describeRedis adds the failure policy of the Redis limiter named as pv
// is, when its observer told d of it: which policy, how many decisions it
// made and when the last, and Redis's last error.
func (d *Dashboard) describeRedis(pv *policyView, now time.Time) {
	d.mu.Lock()
	r, ok := d.redis[pv.Name]
	var seen redisSeen
	if ok {
		seen = *r
	}
	d.mu.Unlock()
	if !ok {
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
