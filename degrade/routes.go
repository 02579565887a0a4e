package degrade

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice"
)

// Routes declares fallbacks per route: one Guard shared by several routes
// answers each request with the Fallbacks of its resource, as the adapters
// set it (sluice.WithResource: an HTTP route pattern, an Echo route path or
// the route table's "POST /cart" entry it matched, a gRPC full method), or with
// the default Fallbacks for the other routes. It is a sluice.FallbackOf[T]
// for sluice.WithFallback. A Routes is immutable and safe for concurrent
// use.
type Routes[T any] struct {
	routes map[string]*Fallbacks[T]
	def    *Fallbacks[T]
}

// NewRoutes returns the Routes answering the requests for each resource of
// routes with its Fallbacks, and the others with def; def may be nil, and
// those requests then pass their errors on. It fails when there is no route
// and no default, or when a route's Fallbacks is nil.
func NewRoutes[T any](routes map[string]*Fallbacks[T], def *Fallbacks[T]) (*Routes[T], error) {
	if len(routes) == 0 && def == nil {
		return nil, errors.New("degrade: NewRoutes: no route and no default")
	}
	m := make(map[string]*Fallbacks[T], len(routes))
	for r, f := range routes {
		if f == nil {
			return nil, fmt.Errorf("degrade: NewRoutes: route %q has nil fallbacks", r)
		}
		m[r] = f
	}
	return &Routes[T]{routes: m, def: def}, nil
}

func (r *Routes[T]) pick(ctx context.Context) *Fallbacks[T] {
	if res, ok := sluice.ResourceFrom(ctx); ok {
		if f, ok := r.routes[res]; ok {
			return f
		}
	}
	return r.def
}

// Declared implements sluice.Fallback: it returns the name of the rule of
// the request's route that answers err, and false when none does.
func (r *Routes[T]) Declared(ctx context.Context, err error) (string, bool) {
	f := r.pick(ctx)
	if f == nil {
		return "", false
	}
	return f.Declared(ctx, err)
}

// AnswerValue implements sluice.FallbackOf: it answers err with the
// Fallbacks of the request's route.
func (r *Routes[T]) AnswerValue(ctx context.Context, err error) (v T, name string, out error) {
	f := r.pick(ctx)
	if f == nil {
		return v, "", err
	}
	return f.AnswerValue(ctx, err)
}

// Answer implements sluice.Fallback: it is AnswerValue without the value.
func (r *Routes[T]) Answer(ctx context.Context, err error) (name string, out error) {
	_, name, out = r.AnswerValue(ctx, err)
	return name, out
}
