package adaptive_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/shedhook"
	"github.com/sluice-go/sluice/ratelimit"
)

// runTimeouts plays the CPU-bound service of
// TestTimeoutsOfAFewBaselinesCutTheLimit (2 cores, 4 ms of CPU, a Guard
// timeout of 12 ms) against policy p, ending each call as the Guard does:
// a call its deadline ended through shedhook.Cut, and, when p is neither
// a Shedder nor a Keyed (Cut declines it), through p's Done. rate gives the
// arrivals' period in ms at each ms.
func runTimeouts(t *testing.T, p sluice.Policy, every func(ms int) int, total int) (ok, timedOut, shed int) {
	type req struct {
		t     sluice.Ticket
		start int
		done  float64
	}
	const (
		cores   = 2.0
		service = 4.0
		timeout = 12
	)
	var inflight []*req
	ctx := sluice.WithKey(context.Background(), "k")
	at := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	for ms := 0; ms < total; ms++ {
		if ms%every(ms) == 0 {
			tk, _, err := p.Admit(ctx, at(ms))
			if err != nil {
				shed++
			} else {
				inflight = append(inflight, &req{t: tk, start: ms})
			}
		}
		share := min(1, cores/float64(len(inflight)))
		kept := inflight[:0]
		for _, r := range inflight {
			r.done += share
			switch {
			case r.done >= service:
				p.Done(r.t, sluice.Success, at(ms+1), at(ms+1-r.start))
				ok++
			case ms+1-r.start >= timeout:
				if !shedhook.Cut(p, uint64(r.t), uint8(sluice.Failure), at(ms+1), at(timeout)) {
					p.Done(r.t, sluice.Failure, at(ms+1), at(timeout))
				}
				timedOut++
			default:
				kept = append(kept, r)
			}
		}
		inflight = kept
	}
	return
}

// A Shedder per key (ratelimit.Keyed, as rules' per_key makes it) behind
// a Guard WithTimeout hears its timeouts as bounds, as a bare one does:
// the overload that cuts a bare Shedder's limit to its floor cuts the
// keyed one's. (Told them as plain failures, it took the timeout for its
// baseline, and its limit stayed at 20, every call timing out.)
func TestKeyedShedderTimeoutsCutTheLimit(t *testing.T) {
	var inner *adaptive.Shedder
	k, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		s := newShedder(t, adaptive.WithQueue(0, 0))
		inner = s
		return s, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	every := func(ms int) int {
		if ms < 3000 {
			return 5
		}
		return 1
	}
	bare := newShedder(t, adaptive.WithQueue(0, 0))
	bok, btimed, bshed := runTimeouts(t, bare, every, 6000)
	kok, ktimed, kshed := runTimeouts(t, k, every, 6000)
	bs, ks := bare.Stats(), inner.Stats()
	t.Logf("bare:  %d ok, %d timed out, %d shed; limit %d, baseline %v", bok, btimed, bshed, bs.Limit, bs.Baseline)
	t.Logf("keyed: %d ok, %d timed out, %d shed; limit %d, baseline %v", kok, ktimed, kshed, ks.Limit, ks.Baseline)
	if ks.Limit > 6 {
		t.Errorf("keyed Shedder: limit %d after 3 s of timeouts (bare: %d)", ks.Limit, bs.Limit)
	}
}
