package routing

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

func TestRoutes(t *testing.T) {
	def := testpolicy.MustGuard(t)
	items := testpolicy.MustGuard(t, testpolicy.Window("ratelimit/items", 90*time.Second))
	rs, err := NewRoutes(DefaultRoute(def), RouteTo("GET /items", items), RouteTo("GET /healthz", nil))
	require.NoError(t, err)
	assert.True(t, rs.NeedsPattern())
	assert.Same(t, items, rs.Match("GET /items").Guard)
	assert.Equal(t, "GET /items", rs.Match("GET /items").Pattern)
	assert.Equal(t, 90*time.Second, rs.Match("GET /items").Window("ratelimit/items"))
	assert.Zero(t, rs.Match("GET /items").Window("other"))
	assert.Nil(t, rs.Match("GET /healthz"), "a route mapped to nil passes through")
	assert.Same(t, def, rs.Match("POST /other").Guard)
	assert.Same(t, def, rs.Default().Guard)
	assert.ElementsMatch(t, rs.Guards(), rs.Guards())
	assert.Len(t, rs.Guards(), 2)

	noDefault, err := NewRoutes(RouteTo("GET /items", items))
	require.NoError(t, err)
	assert.Nil(t, noDefault.Match("GET /other"), "an unmatched route passes through")

	var nilRoutes *Routes
	assert.Nil(t, nilRoutes.Match("x"))
	assert.False(t, nilRoutes.NeedsPattern())
	var nilRoute *Route
	assert.Zero(t, nilRoute.Window("x"))

	only, err := NewRoutes(DefaultRoute(def))
	require.NoError(t, err)
	assert.False(t, only.NeedsPattern())

	_, err = NewRoutes(RouteTo("", def))
	assert.Error(t, err)
	_, err = NewRoutes(RouteTo("a", def), RouteTo("a", def))
	assert.Error(t, err)
	_, err = NewRoutes(DefaultRoute(def), DefaultRoute(def))
	assert.Error(t, err)
}

// MatchMethod finds "METHOD path" entries first, without allocating.
func TestMatchMethod(t *testing.T) {
	g := testpolicy.MustGuard(t)
	rs, err := NewRoutes(RouteTo("POST /cart", g), RouteTo("/cart", g), RouteTo("DELETE /cart", nil), DefaultRoute(g))
	require.NoError(t, err)
	assert.Equal(t, "POST /cart", rs.MatchMethod("POST", "/cart").Pattern)
	assert.Equal(t, "/cart", rs.MatchMethod("GET", "/cart").Pattern)
	assert.Nil(t, rs.MatchMethod("DELETE", "/cart"), "mapped to no Guard: passes through")
	assert.Equal(t, "", rs.MatchMethod("GET", "/other").Pattern, "the default")
	long := "/" + strings.Repeat("x", 300)
	assert.Equal(t, "", rs.MatchMethod("GET", long).Pattern)
	assert.Zero(t, testing.AllocsPerRun(100, func() { rs.MatchMethod("POST", "/cart") }))
	var nilRoutes *Routes
	assert.Nil(t, nilRoutes.MatchMethod("GET", "/"))
}

// A HEAD request matches the "GET path" entry when the table has no
// "HEAD path" one, as net/http's patterns match it.
func TestMatchMethodHeadFindsTheGetEntry(t *testing.T) {
	g := testpolicy.MustGuard(t)
	rs, err := NewRoutes(RouteTo("GET /items", g), RouteTo("HEAD /own", g), RouteTo("GET /own", g))
	require.NoError(t, err)
	assert.Equal(t, "GET /items", rs.MatchMethod("HEAD", "/items").Pattern)
	assert.Equal(t, "HEAD /own", rs.MatchMethod("HEAD", "/own").Pattern)
	assert.Nil(t, rs.MatchMethod("POST", "/items"), "unlisted, no default")
	assert.Zero(t, testing.AllocsPerRun(100, func() { rs.MatchMethod("HEAD", "/items") }))
}
