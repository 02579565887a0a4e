package sluice

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"time"

	"github.com/sluice-go/sluice/internal/guardhook"
)

func init() {
	guardhook.RetryDelay = func(g any, ctx context.Context, attempts int, began time.Time, atLeast time.Duration) (time.Duration, bool) {
		return g.(*Guard).retryDelay(ctx, attempts, began, atLeast)
	}
	guardhook.Detach = func(g any) { g.(*Guard).detach() }
	guardhook.Retire = func(g any) { g.(*Guard).retired.Store(true) }
	guardhook.Retired = func(g any) bool { return g.(*Guard).retired.Load() }
	guardhook.Refused = func(g any) bool { return g.(*Guard).refused.Load() }
	guardhook.Closed = func(g any) bool {
		gd := g.(*Guard)
		gd.unsubsMu.Lock()
		defer gd.unsubsMu.Unlock()
		return gd.closed
	}
	guardhook.Waits = func(g any) bool {
		gd := g.(*Guard)
		return gd != nil && gd.waits != nil
	}
	guardhook.RetryAttempts = func(g any) int {
		if gd := g.(*Guard); gd != nil && gd.retry != nil {
			return gd.retry.attempts
		}
		return 1
	}
	guardhook.Fallbacks = func(g any) any { return g.(*Guard).fallbackList() }
	guardhook.NumFallbacks = func(g any) int { return len(g.(*Guard).fallbacks) }
	guardhook.ReadsResource = func(g any) bool {
		gd := g.(*Guard)
		return gd != nil && gd.resources
	}
	guardhook.Timed = func(g any) bool {
		gd := g.(*Guard)
		return gd != nil && gd.timeout > 0
	}
	guardhook.Classify = func(call any, err error) uint8 {
		o, _ := call.(*Call).classified(err)
		return uint8(o)
	}
	guardhook.Now = func(g any) time.Duration { return g.(*Guard).now() }
	guardhook.RejectedBy = func(err error, g any) bool {
		re := rejectionOf(err)
		return re != nil && re.g != nil && re.g == g.(*Guard)
	}
	guardhook.FallbackAt = func(g any, i int) any { return g.(*Guard).fallbacks[i] }
	guardhook.Served = func(g any, ctx context.Context, name string, err error) { g.(*Guard).served(ctx, name, err) }
	guardhook.OtherTypeError = func(i int, f any, name string, typ reflect.Type, err error) error {
		return otherTypeError(i, f.(Fallback), name, typ, err)
	}
	guardhook.Shadows = func(g any) (bool, []string) {
		gd := g.(*Guard)
		gd.shadowMu.Lock()
		defer gd.shadowMu.Unlock()
		var names []string
		for i, n := range gd.names {
			if i < maxShadowed && gd.shadowSet>>i&1 != 0 && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		return gd.shadowAll, names
	}
	guardhook.Carry = func(from, to any) {
		f, t := from.(*Guard), to.(*Guard)
		f.shadowMu.Lock()
		all, set := f.shadowAll, f.shadowSet
		f.shadowMu.Unlock()
		t.shadowMu.Lock()
		t.shadowAll, t.shadowSet = all, set
		t.publishShadow()
		t.shadowMu.Unlock()
		if f.obs == nil || t.obs == nil || len(f.obs.counts) != len(t.obs.counts) {
			return
		}
		// The calls from has under way end there: t takes the calls that
		// have ended, none in flight. What t's Stats then hold is noted
		// first, so that an observer reading it meanwhile subtracts too
		// much (and reads 0), never too little.
		seed := make([]uint64, len(f.obs.counts))
		for i := range seed {
			seed[i] = f.obs.counts[i].Load()
		}
		for sh := range statShards {
			seed[sh*f.obs.stride+slotAdmitted] = 0
		}
		seed[slotAdmitted] = ended(func(sh, slot int) uint64 { return seed[sh*f.obs.stride+slot] })
		carried := func() Stats {
			st := t.Stats()
			t.countStats(&st, func(sh, slot int) uint64 { return seed[sh*t.obs.stride+slot] })
			return st
		}
		st := carried()
		// Nor the shadow rejections of those under way: a policy never
		// shows more of them than it admitted.
		fixed := false
		for i, ps := range st.Policies {
			if ps.ShadowRejected > ps.Admitted {
				for sh := range statShards {
					seed[sh*f.obs.stride+f.obs.slotShadow+i] = 0
				}
				seed[f.obs.slotShadow+i] = ps.Admitted
				fixed = true
			}
		}
		if fixed {
			st = carried()
		}
		t.carried.Store(&st)
		for i, n := range seed {
			t.obs.counts[i].Store(n)
		}
	}
	guardhook.InFlight = func(g any) uint64 {
		ob := g.(*Guard).obs
		if ob == nil {
			return 0
		}
		// The ends first: a call counted ended after this read was counted
		// admitted before the next.
		done := ended(ob.load)
		var admitted uint64
		for sh := range statShards {
			admitted += ob.load(sh, slotAdmitted)
		}
		return admitted - min(done, admitted)
	}
	guardhook.Carried = func(g any) any {
		if st := g.(*Guard).carried.Load(); st != nil {
			return st
		}
		return nil
	}
	guardhook.Misdeclared = func(err error) bool {
		var m *misdeclaredError
		return errors.As(err, &m)
	}
}

// ended returns how many calls every policy admitted have ended, as load
// reads an observed Guard's counters (or a copy of them) by shard and slot:
// the counts of the durations' histograms.
func ended(load func(shard, slot int) uint64) uint64 {
	var n uint64
	for sh := range statShards {
		for k := range durationKinds {
			base := slotDurations + k*histSlots
			for b := range len(durationBounds) + 1 {
				n += load(sh, base+b)
			}
		}
	}
	return n
}
