package dashboard

import (
	"context"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker/gobreakeradapter"
)

// A breaker of the gobreaker engine shows its state and counts as one of
// the default engine does.
func TestAGobreakerEngineShowsItsState(t *testing.T) {
	d, err := New()
	require.NoError(t, err)
	br, err := gobreakeradapter.New(gobreaker.Settings{Name: "payments", Timeout: time.Minute,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 3 }})
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("pay"), sluice.With(br), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g.Close()
	fail := func(context.Context) error { return errDown }
	_ = g.Do(t.Context(), func(context.Context) error { return nil })
	_ = g.Do(t.Context(), fail)
	_ = g.Do(t.Context(), fail)

	p := getState(t, d).Guards[0].Policies[0]
	assert.Equal(t, "closed", p.State)
	assert.Contains(t, p.Details, detail{"requests", "3"})
	assert.Contains(t, p.Details, detail{"failures", "2"})
	assert.Contains(t, p.Details, detail{"in a row", "2"})

	_ = g.Do(t.Context(), fail) // the third in a row opens it
	p = getState(t, d).Guards[0].Policies[0]
	assert.Equal(t, "open", p.State)
	var next string
	for _, dt := range p.Details {
		if dt.Name == "next probe in" {
			next = dt.Value
		}
	}
	assert.Contains(t, []string{"59s", "1m0s"}, next, "open for a minute")
}
