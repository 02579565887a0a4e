package sluice

import (
	"errors"
	"fmt"
	"math/bits"
)

// Shadow mode: a shadowed policy decides every call exactly as it would
// when enforcing, but a call it rejects goes on through the rest of the
// chain. The policy took nothing for the call it rejected, as with any
// rejection, and hears nothing of how the call ended: a shadowed limiter
// is charged what an enforcing one would be, and a shadowed breaker opens
// and closes on its own outcomes only, so its would-reject count is what
// enforcement would have rejected on the same traffic. A shadowed policy
// that may wait makes no call wait, told so through internal/nowait: a
// Shaper takes each turn as when enforcing, and rejects what enforcement
// would, but lets the call go on at once; a Shedder's queue cannot be
// played so, and a call it would have queued counts as its rejection (an
// approximation: more than enforcement would reject). A policy of another
// package that waits keeps waiting: it cannot see the mark. A shadowed
// policy's quota is not sent to clients (the RateLimit fields, the
// Decision), or they would hold off for a limit only watched; its own state
// moves as when enforcing (a Shedder reports shedding, a breaker opens),
// and what watches that state (a degrade.Auto fed by degrade.StateSignal,
// the metrics) acts on it. The Guard's timeout is not applied while the
// whole Guard is shadowed: the durations the metrics record show the calls
// it would have cut.

// The two modes are apart: one taken out by name still lets every call
// through while the whole Guard is in shadow mode, and one shadowed by name
// stays so when the Guard goes back to enforcing. Only the first 64
// policies of a chain can be shadowed (the whole Guard, "", not for a chain
// longer than 64).

// maxShadowed is the number of leading policies of a chain that can be
// shadowed: one bit each in a word.
const maxShadowed = 64

// WithShadow starts the Guard with the policy named policy (its Name) in
// shadow mode, or, for "", the whole Guard: every policy of its chain.
// It may be given more than once. New fails for a name that is not in the
// chain. By default nothing is shadowed; [Guard.SetShadow] changes it at
// run time.
func WithShadow(policy string) Option {
	return func(g *Guard) error {
		g.shadowInit = append(g.shadowInit, policy)
		return nil
	}
}

// SetShadow puts the policy named policy (every policy of that name) in
// shadow mode when on is true, and takes it out when on is false; policy ""
// does the same for the whole Guard (whose timeout then sets no deadline).
// A shadowed policy decides each call as
// when enforcing, but a call it rejects goes through, counted in
// [PolicyStats].ShadowRejected and reported to the observers
// ([CallEvent].Shadow); one that would make a call wait (a ratelimit
// Shaper's turn, an adaptive Shedder's queue) lets it go on at once (a
// Shedder counts a call it would have queued as rejected). A policy is
// shadowed while it is by name or the whole Guard is.
// SetShadow returns an error, changing nothing, for a name not in the chain
// and for a policy past the 64th. It is safe to call while calls run; a
// call decides with the modes it finds.
func (g *Guard) SetShadow(policy string, on bool) error {
	if g == nil {
		return errors.New("sluice: SetShadow on a nil Guard")
	}
	g.shadowMu.Lock()
	defer g.shadowMu.Unlock()
	return g.setShadowLocked(policy, on)
}

func (g *Guard) setShadowLocked(policy string, on bool) error {
	if policy == "" {
		if on && len(g.policies) > maxShadowed {
			return fmt.Errorf("sluice: SetShadow: the Guard's chain has %d policies; only the first %d can be shadowed", len(g.policies), maxShadowed)
		}
		g.shadowAll = on
	} else {
		var mask uint64
		for i, n := range g.names {
			if n != policy {
				continue
			}
			if i >= maxShadowed {
				return fmt.Errorf("sluice: SetShadow: policy %q is policy %d of the chain; only the first %d can be shadowed", policy, i, maxShadowed)
			}
			mask |= 1 << i
		}
		if mask == 0 {
			return fmt.Errorf("sluice: SetShadow: no policy named %q in the chain", policy)
		}
		if on {
			g.shadowSet |= mask
		} else {
			g.shadowSet &^= mask
		}
	}
	g.publishShadow()
	return nil
}

// publishShadow stores the modes the calls read, under shadowMu.
func (g *Guard) publishShadow() {
	eff := g.shadowSet
	if g.shadowAll {
		eff = ^uint64(0)
	}
	g.shadow.Store(eff)
	g.wholeShadow.Store(g.shadowAll) // no deadline (see WithTimeout)
}

// shadowed lets a call on past policy i, which rejected it with cause
// while in shadow mode: the policy is left out of the call's end, and the
// rejection is kept for the observers, and counted once the call is
// counted admitted, or rejected by a policy after i (see countShadows).
func (g *Guard) shadowed(c *Call, i int, cause error) {
	if c.skip == 0 {
		c.shadowCause = causeOf(cause)
	}
	c.skip |= 1 << i
}

// shadowPolicy returns the index of the first policy that rejected c in
// shadow mode; c.skip must not be 0.
func (c *Call) shadowPolicy() int { return bits.TrailingZeros64(c.skip) }
