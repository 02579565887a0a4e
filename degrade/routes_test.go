package degrade_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
)

func TestRoutesAnswerWithTheFallbacksOfTheRequestsRoute(t *testing.T) {
	must := func(rules ...degrade.Rule[string]) *degrade.Fallbacks[string] {
		f, err := degrade.New(rules...)
		require.NoError(t, err)
		return f
	}
	routes, err := degrade.NewRoutes(map[string]*degrade.Fallbacks[string]{
		"GET /search":  must(degrade.OnRateLimited(degrade.Value("search: slow down"))),
		"GET /product": must(degrade.OnRejected(degrade.Value("product: cached page"))),
	}, must(degrade.OnError(degrade.Value("generic"))))
	require.NoError(t, err)
	g := newGuard(t, sluice.With(rateLimiter(t)), sluice.WithClock(sluice.NewManualClock(0)), sluice.WithFallback(routes))

	for route, want := range map[string]string{
		"GET /search":  "search: slow down",
		"GET /product": "product: cached page",
		"GET /other":   "generic",
		"":             "generic",
	} {
		ctx := context.Background()
		if route != "" {
			ctx = sluice.WithResource(ctx, route)
		}
		v, err := sluice.Execute(ctx, g, answer("fresh"))
		require.NoError(t, err, route)
		assert.Equal(t, want, v, route)
	}

	noDefault, err := degrade.NewRoutes(map[string]*degrade.Fallbacks[string]{
		"GET /search": must(degrade.OnError(degrade.Value("x"))),
	}, nil)
	require.NoError(t, err)
	name, out := noDefault.Answer(context.Background(), errBoom)
	assert.Empty(t, name)
	assert.Same(t, errBoom, out)
	_, ok := noDefault.Declared(context.Background(), errBoom)
	assert.False(t, ok, "no route in ctx and no default: nothing declared")
	name, ok = noDefault.Declared(sluice.WithResource(context.Background(), "GET /search"), errBoom)
	assert.True(t, ok)
	assert.Equal(t, "error", name)

	_, err = degrade.NewRoutes[string](nil, nil)
	assert.ErrorContains(t, err, "no route")
	_, err = degrade.NewRoutes(map[string]*degrade.Fallbacks[string]{"r": nil}, nil)
	assert.ErrorContains(t, err, "nil fallbacks")
}
