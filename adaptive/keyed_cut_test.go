package adaptive_test

import (
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/ratelimit"
)

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
	bare := newShedder(t, adaptive.WithQueue(0, 0))
	bc, kc := runTimeouts(t, bare), runTimeouts(t, k)
	bs, ks := bare.Stats(), inner.Stats()
	t.Logf("bare:  overload %+v; limit %d, baseline %v", bc[1], bs.Limit, bs.Baseline)
	t.Logf("keyed: overload %+v; limit %d, baseline %v", kc[1], ks.Limit, ks.Baseline)
	if ks.Limit > 6 {
		t.Errorf("keyed Shedder: limit %d after 3 s of timeouts (bare: %d)", ks.Limit, bs.Limit)
	}
}
