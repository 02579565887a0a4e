package routing

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policywindow"
)

// windowed is a policy that admits everything and reports a window.
type windowed struct {
	name string
	w    time.Duration
}

func (p windowed) Name() string { return p.name }
func (windowed) Admit(context.Context, time.Duration) sluice.Verdict {
	return sluice.Verdict{Limit: -1}
}
func (windowed) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (windowed) Needs() sluice.Needs                                              { return 0 }

func init() {
	policywindow.Register(func(p any) time.Duration {
		if w, ok := p.(windowed); ok {
			return w.w
		}
		return 0
	})
}

func mustGuard(t *testing.T, ps ...sluice.Policy) *sluice.Guard {
	t.Helper()
	g, err := sluice.New(sluice.With(ps...))
	require.NoError(t, err)
	return g
}
