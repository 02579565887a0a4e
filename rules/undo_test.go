package rules

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// picky is an observer that counts the calls of the Guards it hears, and
// refuses a Guard with a policy named refuse.
type picky struct {
	refuse string
	calls  atomic.Int64
}

func (o *picky) Attach(g *sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	for _, p := range g.Policies() {
		if p.Name() == o.refuse {
			return nil, nil, errors.New("picky: refused " + o.refuse)
		}
	}
	var detached atomic.Bool
	observe := func(context.Context, sluice.CallEvent) {
		if !detached.Load() { // a closed Guard's calls are not heard
			o.calls.Add(1)
		}
	}
	return observe, func() { detached.Store(true) }, nil
}

// A reload whose Guard an option refuses, after it changed numbers in
// place and closed the Guard it rebuilds, undoes both: the numbers in
// force are the old ones, and the old Guard is served again, observed.
func TestAGuardRefusedAtReloadUndoesWhatTheLoadChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &picky{refuse: "cart-log"}
		l, path := newLoader(t, twoLimits, WithGuardOptions(func(string) []sluice.Option {
			return []sluice.Option{sluice.WithObserver(obs)}
		}))
		h := serve(t, l)
		assert.Equal(t, []int{200, 429}, statuses(h, "/cart", 2))
		g, _ := l.Guard("items")
		tb := g.Policies()[0].(*ratelimit.TokenBucket)

		next := strings.Replace(twoLimits, "rate: 1/min, burst: 3", "rate: 2/min, burst: 3", 1)
		next = strings.Replace(next, "name: cart-window, kind: fixed-window, limit: 1", "name: cart-log, kind: sliding-log, limit: 5", 1)
		writeRules(t, path, next)
		err := l.Reload()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "picky: refused cart-log")
		assert.Equal(t, uint64(1), l.Version().N)
		assert.Equal(t, ratelimit.Rate{Count: 1, Period: time.Minute}, tb.Rate(), "the numbers changed in place are set back")

		before := obs.calls.Load()
		assert.Equal(t, []int{429}, statuses(h, "/cart", 1), "the old window, still spent")
		assert.Equal(t, before+1, obs.calls.Load(), "the cart's Guard is observed still")
		cart, ok := l.Guard("cart")
		require.True(t, ok)
		assert.Equal(t, "cart-window", cart.Policies()[0].Name())

		obs.refuse = ""
		require.NoError(t, l.Reload())
		assert.Equal(t, uint64(2), l.Version().N)
		assert.Equal(t, []int{200, 200}, statuses(h, "/cart", 2))
	})
}

// A Guard made again after a refused load takes the shadow modes in
// force: those a reload set in place since it was made.
func TestAGuardMadeAgainKeepsTheShadowModesInForce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &picky{refuse: "refused"}
		l, path := newLoader(t, twoLimits, WithGuardOptions(func(string) []sluice.Option {
			return []sluice.Option{sluice.WithObserver(obs)}
		}))
		h := serve(t, l)
		shadowed := strings.Replace(twoLimits, "rate: 1/min, burst: 3}", "rate: 1/min, burst: 3, shadow: true}", 1)
		writeRules(t, path, shadowed)
		require.NoError(t, l.Reload())
		require.Equal(t, []string{"policy items-rate: shadow"}, l.Status().Changes)
		assert.Equal(t, []int{200, 200, 200, 200}, statuses(h, "/items", 4), "items-rate shadowed")
		refused := strings.Replace(shadowed, "rate: 1/min, burst: 3, shadow: true}",
			"rate: 1/min, burst: 3, shadow: true}\n      - {name: refused, kind: fixed-window, limit: 100, window: 1m}", 1)
		writeRules(t, path, refused)
		require.Error(t, l.Reload())
		assert.Equal(t, uint64(2), l.Version().N)
		assert.Equal(t, []int{200}, statuses(h, "/items", 1), "the rules in force (version 2) shadow items-rate")
		writeRules(t, path, strings.Replace(shadowed, "limit: 1, window: 1m", "limit: 2, window: 1m", 1))
		require.NoError(t, l.Reload())
		assert.Equal(t, []int{200}, statuses(h, "/items", 1), "the rules in force (version 3) shadow items-rate")
	})
}

// A refused load leaves the shadow modes of the Guards it kept as they
// were, a mode set by hand included.
func TestAFailedLoadLeavesShadowModesBe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &picky{refuse: "cart-log"}
		l, path := newLoader(t, twoLimits, WithGuardOptions(func(string) []sluice.Option {
			return []sluice.Option{sluice.WithObserver(obs)}
		}))
		h := serve(t, l)
		g, _ := l.Guard("items")
		require.NoError(t, g.SetShadow("items-rate", true))
		assert.Equal(t, []int{200, 200, 200, 200}, statuses(h, "/items", 4))
		next := strings.Replace(twoLimits, "rate: 1/min, burst: 3}", "rate: 1/min, burst: 3, shadow: true}", 1)
		next = strings.Replace(next, "name: cart-window, kind: fixed-window, limit: 1", "name: cart-log, kind: sliding-log, limit: 5", 1)
		writeRules(t, path, next)
		require.Error(t, l.Reload())
		assert.Equal(t, []int{200}, statuses(h, "/items", 1), "items-rate is shadowed, as before the failed load")
	})
}

// A load refused by a Guard's options sets no number of a policy kept: a
// breaker whose window the file changed keeps the failures counted in the
// one it has, and trips on the next, as the rules in force say.
func TestARefusedLoadKeepsABreakersCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rules = `
guards:
  api:
    policies:
      - {name: db, kind: breaker, consecutive_failures: 2, open_for: 1m}
  cart:
    policies:
      - {name: cart-window, kind: fixed-window, limit: 100, window: 1m}
routes:
  - {route: "GET /cart", guard: cart}
default: api
`
		obs := &picky{refuse: "cart-log"}
		l, path := newLoader(t, rules, WithGuardOptions(func(string) []sluice.Option {
			return []sluice.Option{sluice.WithObserver(obs)}
		}))
		g, _ := l.Guard("api")
		boom := errors.New("boom")
		fail := func(context.Context) error { return boom }
		require.ErrorIs(t, g.Do(context.Background(), fail), boom) // 1 of 2 consecutive failures

		bad := strings.Replace(rules, "consecutive_failures: 2, open_for: 1m", "consecutive_failures: 2, open_for: 1m, window_calls: 50", 1)
		bad = strings.Replace(bad, "name: cart-window, kind: fixed-window", "name: cart-log, kind: sliding-log", 1)
		writeRules(t, path, bad)
		require.Error(t, l.Reload(), "the observer refuses the cart's new Guard")
		require.Equal(t, uint64(1), l.Version().N)

		g2, _ := l.Guard("api")
		require.Same(t, g, g2)
		require.ErrorIs(t, g.Do(context.Background(), fail), boom) // 2 of 2: trips
		assert.ErrorIs(t, g.Do(context.Background(), func(context.Context) error { return nil }), sluice.ErrCircuitOpen,
			"two consecutive failures under the rules in force; the failed load reset the breaker's count")
	})
}

// A shadow mode set by hand (the dashboard's SetShadow) survives a reload
// that rebuilds the Guard for another reason (here its timeout), as it
// survives a failed load and a reload that keeps the Guard; the file's
// own mode, where it changes, wins.
func TestAShadowModeSetByHandSurvivesARebuild(t *testing.T) {
	const r = `
guards:
  api:
    timeout: 2s
    policies:
      - {name: a, kind: token-bucket, rate: 1/min, burst: 1}
default: api
`
	l, path := newLoader(t, r)
	g, _ := l.Guard("api")
	require.NoError(t, g.SetShadow("a", true))
	h := serve(t, l)
	assert.Equal(t, []int{200, 200}, statuses(h, "/x", 2))
	writeRules(t, path, strings.Replace(r, "timeout: 2s", "timeout: 3s", 1))
	require.NoError(t, l.Reload())
	assert.Equal(t, []int{200}, statuses(h, "/x", 1), "a is still in shadow mode, as set by hand")
}

// A load refused by a Guard's options changes nothing: the Guard of the
// rules in force, made again from its options, keeps its counters.
func TestARefusedLoadKeepsTheGuardsCounters(t *testing.T) {
	obs := &picky{refuse: "cart-log"}
	l, path := newLoader(t, twoLimits, WithGuardOptions(func(string) []sluice.Option {
		return []sluice.Option{sluice.WithObserver(obs)}
	}))
	h := serve(t, l)
	assert.Equal(t, []int{200, 429}, statuses(h, "/cart", 2))
	g, _ := l.Guard("cart")
	require.Equal(t, uint64(1), g.Stats().Policies[0].Admitted)

	writeRules(t, path, strings.Replace(twoLimits, "name: cart-window, kind: fixed-window, limit: 1", "name: cart-log, kind: sliding-log, limit: 5", 1))
	require.Error(t, l.Reload())
	g2, _ := l.Guard("cart")
	st := g2.Stats().Policies[0]
	assert.Equal(t, uint64(1), st.Admitted, "a refused load reset the counters of the rules in force")
	assert.Equal(t, uint64(1), st.Rejected[sluice.CauseRateLimited])
}

// meddler is an observer that, when armed and attached to the Guard named
// zz, puts the last Guard named api it was attached to in shadow mode by
// hand (as the dashboard does, which shows a Guard from its making) and
// refuses zz.
type meddler struct {
	armed atomic.Bool
	api   *sluice.Guard
}

func (o *meddler) Attach(g *sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	switch g.Name() {
	case "api":
		if o.armed.Load() { // the load's, not the one made again
			o.api = g
		}
	case "zz":
		if o.armed.CompareAndSwap(true, false) {
			if err := o.api.SetShadow("", true); err != nil {
				return nil, nil, err
			}
			return nil, nil, errors.New("meddler: refused zz")
		}
	}
	return func(context.Context, sluice.CallEvent) {}, func() {}, nil
}

// A shadow mode set by hand on a Guard a load made, while the load ran,
// holds on the Guard made again when the load then fails: the operator was
// told it was set.
func TestAShadowModeSetByHandDuringAFailedLoadHolds(t *testing.T) {
	v1 := "guards:\n  api:\n    timeout: 1s\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 100/s, burst: 100}\n" +
		"  zz:\n    timeout: 1s\n    policies:\n      - {name: other, kind: token-bucket, rate: 100/s, burst: 100}\ndefault: api\n"
	obs := &meddler{}
	l, path := newLoader(t, v1, WithGuardOptions(func(string) []sluice.Option {
		return []sluice.Option{sluice.WithObserver(obs)}
	}))
	writeRules(t, path, strings.ReplaceAll(v1, "timeout: 1s", "timeout: 2s"))
	obs.armed.Store(true)
	require.ErrorContains(t, l.Reload(), "meddler: refused zz")
	g, _ := l.Guard("api")
	require.NotSame(t, obs.api, g)
	require.True(t, g.Stats().Shadowed, "the shadow mode set by hand on the Guard the failed load made was lost")
}
