package otelmetrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker/gobreakeradapter"
)

// A breaker of the gobreaker engine has its state and failure ratio
// recorded as one of the default engine has.
func TestAGobreakerEngineRecordsItsState(t *testing.T) {
	m, reader := newReader(t)
	br, err := gobreakeradapter.New(gobreaker.Settings{Name: "backend", Timeout: time.Minute,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 2 }})
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(br), sluice.WithObserver(m))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	down := errors.New("down")
	for _, fail := range []bool{false, false, false, true} {
		_ = g.Do(t.Context(), func(context.Context) error {
			if fail {
				return down
			}
			return nil
		})
	}
	assert.Equal(t, map[string]float64{
		"sluice.circuit_breaker.state=closed,sluice.guard=api,sluice.policy=breaker/backend":    1,
		"sluice.circuit_breaker.state=open,sluice.guard=api,sluice.policy=breaker/backend":      0,
		"sluice.circuit_breaker.state=half_open,sluice.guard=api,sluice.policy=breaker/backend": 0,
	}, points(t, reader, "sluice.circuit_breaker.state"))
	assert.Equal(t, map[string]float64{"sluice.guard=api,sluice.policy=breaker/backend": 0.25},
		points(t, reader, "sluice.circuit_breaker.failure_ratio"))

	_ = g.Do(t.Context(), func(context.Context) error { return down })
	assert.Equal(t, 1.0, points(t, reader, "sluice.circuit_breaker.state")["sluice.circuit_breaker.state=open,sluice.guard=api,sluice.policy=breaker/backend"])
}
