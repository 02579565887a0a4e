package rules

import (
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// closeCounter is a policy the program gives a Guard with WithGuardOptions
// that notes whether it was closed.
type closeCounter struct {
	sluice.Policy
	closes atomic.Int32
}

func (c *closeCounter) Close() error { c.closes.Add(1); return nil }

// A load that fails after it made a guard anew (the middleware refuses
// another guard) undoes itself: the rules in force stay, and so do the
// policies the program's options gave the guard, which its old Guard (made
// again from the same options) serves on with: none is closed.
func TestAFailedLoadLeavesTheSharedOptionsPoliciesOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner, err := ratelimit.NewGCRA(ratelimit.PerSecond(10), 10)
		require.NoError(t, err)
		shared := &closeCounter{Policy: inner}
		l, path := newLoader(t, retryingGuardRules, WithGuardOptions(func(g string) []sluice.Option {
			switch g {
			case "cart":
				return []sluice.Option{sluice.WithRetry(sluice.Retry{})}
			case "items":
				return []sluice.Option{sluice.With(shared)}
			}
			return nil
		}))
		h := serve(t, l)
		require.Equal(t, []int{200}, statuses(h, "/items", 1))

		// items gains a timeout (it is made anew), and a route moves onto
		// cart, which the middleware refuses: the load fails.
		writeRules(t, path, itemsRebuiltRules+"  - {route: \"GET /cart\", guard: cart}\n")
		require.Error(t, l.Reload())
		require.Equal(t, uint64(1), l.Version().N, "the rules in force stay")
		require.Zero(t, shared.closes.Load(),
			"the failed load closed a policy the Guard in force still serves with")
	})
}

// A policy the options gave a rebuilt guard's old Guard that its successor
// does not have, but another Guard of the new state does (one the options
// share between guards), serves on in that Guard: the load does not close
// it.
func TestARebuiltGuardLeavesAPolicyAnotherGuardServesWithOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner, err := ratelimit.NewGCRA(ratelimit.PerSecond(10), 10)
		require.NoError(t, err)
		shared := &closeCounter{Policy: inner}
		var itemsLeft atomic.Bool // the program moves items off the shared policy
		l, path := newLoader(t, retryingGuardRules, WithGuardOptions(func(g string) []sluice.Option {
			if g == "items" && itemsLeft.Load() {
				return nil
			}
			return []sluice.Option{sluice.With(shared)}
		}))
		itemsLeft.Store(true)
		writeRules(t, path, itemsRebuiltRules)
		require.NoError(t, l.Reload())
		cart, _ := l.Guard("cart")
		require.Contains(t, cart.Policies(), sluice.Policy(shared), "cart, kept, serves with the shared policy")
		require.Zero(t, shared.closes.Load(), "the load closed a policy the kept guard cart serves with")
	})
}

// itemsRebuiltRules are retryingGuardRules with a timeout for items, which
// makes its Guard anew.
var itemsRebuiltRules = strings.Replace(retryingGuardRules, "  items:\n", "  items:\n    timeout: 1s\n", 1)
