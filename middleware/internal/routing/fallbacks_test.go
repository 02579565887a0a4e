package routing

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluice-go/sluice"
)

// The most specific fallback answers: route and cause, route, cause, then
// neither; a table without one for the rejection answers nothing.
func TestLookupFallbackPrecedence(t *testing.T) {
	all := map[FallbackKey]string{
		{"/a", sluice.CauseRateLimited}: "a limited",
		{"/a", sluice.CauseNone}:        "a any",
		{"", sluice.CauseCircuitOpen}:   "any open",
		{"", sluice.CauseNone}:          "any any",
	}
	for _, tc := range []struct {
		route string
		cause sluice.Cause
		want  string
	}{
		{"/a", sluice.CauseRateLimited, "a limited"},
		{"/a", sluice.CauseCircuitOpen, "a any"},
		{"/b", sluice.CauseCircuitOpen, "any open"},
		{"/b", sluice.CauseOverloaded, "any any"},
	} {
		got, ok := LookupFallback(all, tc.route, tc.cause)
		assert.True(t, ok)
		assert.Equal(t, tc.want, got, "%s %v", tc.route, tc.cause)
	}
	some := map[FallbackKey]string{{"/a", sluice.CauseRateLimited}: "a limited"}
	got, ok := LookupFallback(some, "/a", sluice.CauseCircuitOpen)
	assert.False(t, ok)
	assert.Empty(t, got)
	_, ok = LookupFallback[string](nil, "/a", sluice.CauseRateLimited)
	assert.False(t, ok)
}
