package rules

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
)

// uniqueNames is an observer that, like otelmetrics and the dashboard, refuses
// a Guard whose name a Guard it still observes has, and counts the calls
// of the Guards it observes.
type uniqueNames struct {
	mu    sync.Mutex
	names map[string]bool
	calls atomic.Int64
}

func (o *uniqueNames) Attach(g *sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.names[g.Name()] {
		return nil, nil, errors.New("uniqueNames: a Guard named " + g.Name() + " is observed already")
	}
	o.names[g.Name()] = true
	var detached atomic.Bool
	var once sync.Once
	return func(context.Context, sluice.CallEvent) {
			if !detached.Load() {
				o.calls.Add(1)
			}
		}, func() {
			once.Do(func() {
				detached.Store(true)
				o.mu.Lock()
				delete(o.names, g.Name())
				o.mu.Unlock()
			})
		}, nil
}

// A load that fails after it made a rebuilt guard's successor leaves the
// guard's Guard in force observed, made again: the failed successor lets
// its observers go before, so that an observer that refuses a second Guard
// of one name (otelmetrics, the dashboard) takes the remade one.
func TestAFailedLoadLetsTheSuccessorGoBeforeRemaking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &uniqueNames{names: map[string]bool{}}
		l, path := newLoader(t, retryingGuardRules, WithGuardOptions(func(g string) []sluice.Option {
			opts := []sluice.Option{sluice.WithObserver(obs)}
			if g == "cart" {
				opts = append(opts, sluice.WithRetry(sluice.Retry{}))
			}
			return opts
		}))
		h := serve(t, l)
		require.Equal(t, []int{200}, statuses(h, "/items", 1))
		old, _ := l.Guard("items")

		// items is made anew (a timeout), then the middleware refuses the
		// route onto cart: the load fails and is undone.
		writeRules(t, path, itemsRebuiltRules+"  - {route: \"GET /cart\", guard: cart}\n")
		require.Error(t, l.Reload())
		in, _ := l.Guard("items")
		require.NotSame(t, old, in, "the Guard in force was not made again: it serves on with its observers let go (retired %v)",
			guardhook.Retired(in))

		before := obs.calls.Load()
		require.Equal(t, []int{200}, statuses(h, "/items", 1))
		require.Equal(t, before+1, obs.calls.Load(), "the items Guard in force is not observed after the failed load")
	})
}
