package middleware

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/middleware/internal/routing"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

// NewRoutes builds the table the adapters read, and refuses what would
// otherwise be a route that silently never matches.
func TestNewRoutes(t *testing.T) {
	g := testpolicy.MustGuard(t)
	rs, err := NewRoutes(DefaultRoute(g), RouteTo("GET /items/{id}", g), RouteTo("GET /files/{path...}", nil), RouteTo("/pkg.Svc/Method", g), RouteTo("/echo/:id", g))
	require.NoError(t, err)
	tbl := routing.TableOf(rs)
	require.NotNil(t, tbl)
	assert.Same(t, g, tbl.Match("GET /items/{id}").Guard)
	assert.Nil(t, tbl.Match("GET /files/{path...}"))
	assert.Same(t, g, tbl.Default().Guard)
	assert.Nil(t, routing.TableOf((*Routes)(nil)))

	for _, bad := range []string{"GET /x/{", "/x/}", "/x/{}", "/x/{...}", "/x/a{id}", "/x/{id}b", "/x/{{id}}"} {
		_, err := NewRoutes(RouteTo(bad, g))
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), "malformed pattern")
		}
	}
	_, err = NewRoutes(RouteTo("", g))
	assert.Error(t, err)
	_, err = NewRoutes(RouteTo("/a", g), RouteTo("/a", g))
	assert.Error(t, err)
	_, err = NewRoutes(DefaultRoute(g), DefaultRoute(g))
	assert.Error(t, err)
}

// closing is a policy that counts its Close calls.
type closing struct {
	testpolicy.Admitter
	n *int
}

func (c closing) Close() error { *c.n++; return nil }

// Close closes each Guard of the table once, the default's too.
func TestRoutesClose(t *testing.T) {
	var na, nb int
	a := testpolicy.MustGuard(t, closing{testpolicy.Admitter{N: "a"}, &na})
	b := testpolicy.MustGuard(t, closing{testpolicy.Admitter{N: "b"}, &nb})
	rs, err := NewRoutes(DefaultRoute(a), RouteTo("/a", a), RouteTo("/b", b), RouteTo("/none", nil))
	require.NoError(t, err)
	require.NoError(t, rs.Close())
	assert.Equal(t, 1, na)
	assert.Equal(t, 1, nb)
	assert.NoError(t, (*Routes)(nil).Close())
}

// Wildcards no router accepts, which would name a route no request has,
// are refused: "..." or {$} before the last segment, a name given twice, a
// wildcard host.
// A name that is no Go identifier stays, as chi's routes may have one.
func TestNewRoutesRefusesWildcardsNoRouteHas(t *testing.T) {
	g := testpolicy.MustGuard(t)
	for bad, why := range map[string]string{
		"GET /files/{path...}/raw": "must be the last segment",
		"GET /u/{id}/{id}":         `"id" is named twice`,
		"GET /u/{$}/x":             "{$} ends a path",
		"GET /u/{$...}":            "{$} ends a path",
		"GET {tenant}/orders":      "in the host",
		"{tenant}/orders/{id}":     "in the host",
	} {
		_, err := NewRoutes(RouteTo(bad, g))
		assert.ErrorContains(t, err, why, bad)
	}
	for _, good := range []string{"GET /files/{path...}", "GET /u/{$}", "/u/{user-id}", "GET /a/{x}/b/{y}"} {
		_, err := NewRoutes(RouteTo(good, g))
		assert.NoError(t, err, good)
	}
}
