package breaker

import (
	"math/rand/v2"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
)

func randFloat() float64 { return rand.Float64() }

// permitEnv is what a policy of this package needs to act outside a Guard
// (ForceOpen, Counts, a Done without the end instant): its clock.
type permitEnv struct {
	clock  sluice.Clock
	system bool // clock is sluice.SystemClock: read it without an interface call
}

func newPermitEnv(clock sluice.Clock) permitEnv {
	return permitEnv{clock: clock, system: clock == sluice.SystemClock}
}

func (e *permitEnv) now() time.Duration {
	if e.system {
		return monoclock.Now()
	}
	return e.clock.Now()
}
