package degrade

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/isnil"
)

// NewRoutes declares fallbacks per route: it returns the Fallbacks that
// answer the requests for each resource of routes with its Fallbacks, and
// the others with def, so that one Guard shared by several routes answers
// each request with the Fallbacks of its resource, as the adapters set it
// (sluice.WithResource: an HTTP route pattern, an Echo route path or the
// route table's "POST /cart" entry it matched, a gRPC full method). def may
// be nil, and the other requests then pass their errors on. It fails when
// there is no route and no default, or when a route's Fallbacks is nil or
// zero (not made by New).
func NewRoutes[T any](routes map[string]*Fallbacks[T], def *Fallbacks[T]) (*Fallbacks[T], error) {
	if len(routes) == 0 && def == nil {
		return nil, errors.New("degrade: NewRoutes: no route and no default")
	}
	m := make(map[string]*Fallbacks[T], len(routes))
	for r, f := range routes {
		if f == nil {
			return nil, fmt.Errorf("degrade: NewRoutes: route %q has nil fallbacks", r)
		}
		if isnil.Unmade(f) {
			return nil, fmt.Errorf("degrade: NewRoutes: route %q has a zero Fallbacks, which never answers: make it with New", r)
		}
		m[r] = f
	}
	if def != nil && isnil.Unmade(def) {
		return nil, errors.New("degrade: NewRoutes: the default is a zero Fallbacks, which never answers: make it with New")
	}
	return &Fallbacks[T]{routed: true, routes: m, def: def}, nil
}

// pick returns the Fallbacks of the request's route, or the default.
func (f *Fallbacks[T]) pick(ctx context.Context) *Fallbacks[T] {
	if res, ok := sluice.ResourceFrom(ctx); ok {
		if rf, ok := f.routes[res]; ok {
			return rf
		}
	}
	return f.def
}
