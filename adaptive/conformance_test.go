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
		{"shedder", overloaded, func(t *testing.T) sluice.Policy {
			return newShedder(t)
		}},
		{"shedder/no-queue", overloaded, func(t *testing.T) sluice.Policy {
			return newShedder(t, adaptive.WithQueue(0, 0))
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
