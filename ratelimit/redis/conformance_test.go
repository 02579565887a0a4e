package redislimit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policytest"
	"github.com/sluice-go/sluice/ratelimit"
)

func rateOf(iv time.Duration) ratelimit.Rate { return ratelimit.Rate{Count: 1, Period: iv} }

func TestConformance(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			policytest.Run(t, policytest.Config{
				New: func(t *testing.T) sluice.Policy {
					// A long interval: Redis time moving by microseconds
					// between two calls does not change a decision.
					l, err := alg.make(c, 50, 36*time.Second, WithName(uniqueName(alg.name)), WithTimeout(5*time.Second))
					require.NoError(t, err)
					return l
				},
				Causes: []error{sluice.ErrRateLimited},
				// Redis's clock moves between two decisions, and may cross a
				// refill or a window's end.
				RemainingSlack: 1,
			})
		})
	}
}

func TestConformanceAll(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	policytest.Run(t, policytest.Config{
		New: func(t *testing.T) sluice.Policy {
			var ls []*Limiter
			for _, alg := range algorithms {
				l, err := alg.make(c, 40, 36*time.Second, WithName(uniqueName(alg.name)))
				require.NoError(t, err)
				ls = append(ls, l)
			}
			all, err := All(ls, WithName(uniqueName("all")), WithTimeout(5*time.Second))
			require.NoError(t, err)
			return all
		},
		Causes:         []error{sluice.ErrRateLimited},
		RemainingSlack: 1,
	})
}
