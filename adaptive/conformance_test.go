package adaptive_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/policytest"
)

func TestConformance(t *testing.T) {
	overloaded := []error{sluice.ErrOverloaded}
	limited := []error{sluice.ErrConcurrencyLimited}
	cases := []struct {
		name   string
		causes []error
		new    func(t *testing.T) sluice.Policy
	}{
		{"guard/cpu-high", overloaded, func(t *testing.T) sluice.Policy {
			// CPU pinned above the threshold: sheds whenever inflight
			// exceeds the estimate.
			g, err := adaptive.NewGuard(adaptive.WithSampler(adaptive.NewManualSampler(0.95, 0)),
				adaptive.WithWindow(time.Second, 10))
			require.NoError(t, err)
			t.Cleanup(func() { _ = g.Close() })
			return g
		}},
		{"guard/rules", overloaded, func(t *testing.T) sluice.Policy {
			g, err := adaptive.NewGuard(adaptive.WithSampler(adaptive.NewManualSampler(0.5, 8)),
				adaptive.WithWindow(time.Second, 10), adaptive.WithMaxInflight(4),
				adaptive.WithMaxQPS(300), adaptive.WithMaxAvgRT(50*time.Millisecond), adaptive.WithMaxLoad1(4))
			require.NoError(t, err)
			t.Cleanup(func() { _ = g.Close() })
			return g
		}},
		{"concurrency/gradient", limited, func(t *testing.T) sluice.Policy {
			l, err := adaptive.NewConcurrencyLimit(adaptive.WithAlgorithm(adaptive.Gradient{
				InitialLimit: 4, Window: 10 * time.Millisecond}))
			require.NoError(t, err)
			return l
		}},
		{"concurrency/aimd", limited, func(t *testing.T) sluice.Policy {
			l, err := adaptive.NewConcurrencyLimit(adaptive.WithAlgorithm(adaptive.AIMD{
				InitialLimit: 4, Window: 10 * time.Millisecond}))
			require.NoError(t, err)
			return l
		}},
		{"concurrency/queued", limited, func(t *testing.T) sluice.Policy {
			l, err := adaptive.NewConcurrencyLimit(adaptive.WithQueue(8, time.Millisecond))
			require.NoError(t, err)
			return l
		}},
		{"bulkhead", limited, func(t *testing.T) sluice.Policy {
			b, err := adaptive.NewBulkhead(3)
			require.NoError(t, err)
			return b
		}},
		{"bulkhead/queued", limited, func(t *testing.T) sluice.Policy {
			b, err := adaptive.NewBulkhead(3, adaptive.WithQueue(4, time.Millisecond))
			require.NoError(t, err)
			return b
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			policytest.Run(t, policytest.Config{New: c.new, Causes: c.causes})
		})
	}
}
