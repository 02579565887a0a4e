package otelmetrics

import (
	"context"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/stretchr/testify/require"
)

// panicsOnEnd is an Observer that panics when it hears a call's end, as a
// Guard's docs allow for ("an observer that panics must not keep the
// policies from hearing it").
type panicsOnEnd struct{}

func (panicsOnEnd) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return func(context.Context, sluice.CallEvent) { panic("observer") }, nil, nil
}

// A closed Guard is let go once its calls have ended, though an observer
// before the metrics panicked at a call's end, so that the metrics never
// hear that call and their count of calls heard stays one short of the
// Guard's Stats: it is not read at every collection, and kept, for good.
func TestAClosedGuardIsLetGoAfterAnObserverPanicked(t *testing.T) {
	for _, first := range []sluice.Observer{nil, panicsOnEnd{}} {
		m, err := New(WithResourceAttribute("http.route"))
		require.NoError(t, err)
		opts := []sluice.Option{sluice.WithName("api")}
		if first != nil {
			opts = append(opts, sluice.WithObserver(first))
		}
		g, err := sluice.New(append(opts, sluice.WithObserver(m))...)
		require.NoError(t, err)
		func() {
			defer func() { _ = recover() }()
			_ = g.Do(sluice.WithResource(context.Background(), "GET /x"), func(context.Context) error { return nil })
		}()
		require.NoError(t, g.Close())
		for range 3 {
			_, err := m.Produce(context.Background())
			require.NoError(t, err)
		}
		m.mu.Lock()
		r := m.retired["api"]
		m.mu.Unlock()
		require.NotNil(t, r)
		require.Nil(t, r.g, "the closed Guard, no call under way, let go (first observer %T)", first)
	}
}
