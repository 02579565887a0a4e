package middleware

import (
	"context"
	"errors"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/keyhook"
	"github.com/sluice-go/sluice/middleware/internal/routing"
)

// Routes maps routes to Guards, with a default for routes it does not list.
// A route mapped to a nil Guard, or an unlisted route when there is no
// default, passes through unguarded. The adapters take one with their
// WithRoutes option. A Routes is immutable once built and safe for
// concurrent use.
type Routes struct {
	t *routing.Routes
}

// RoutesOption configures a Routes table.
type RoutesOption struct {
	o routing.RoutesOption
}

// RouteTo maps pattern (an HTTP pattern such as "GET /items/{id}", an Echo
// route path such as "/items/:id", a gRPC full method such as
// "/pkg.Service/Method") to g. A nil g makes the route pass through even when
// the table has a default. An empty pattern, a pattern given twice and a
// malformed wildcard ("GET /x/{") make NewRoutes fail.
func RouteTo(pattern string, g *sluice.Guard) RoutesOption {
	return RoutesOption{routing.RouteTo(pattern, g)}
}

// DefaultRoute makes g guard every route the table does not list. Without it,
// unlisted routes pass through.
func DefaultRoute(g *sluice.Guard) RoutesOption {
	return RoutesOption{routing.DefaultRoute(g)}
}

// NewRoutes builds a route table. It fails on an empty or malformed pattern,
// a pattern given twice, or a default given twice.
func NewRoutes(opts ...RoutesOption) (*Routes, error) {
	os := make([]routing.RoutesOption, len(opts))
	for i, o := range opts {
		os[i] = o.o
	}
	t, err := routing.NewRoutes(os...)
	if err != nil {
		return nil, err
	}
	return &Routes{t: t}, nil
}

func init() {
	routing.TableOf = func(rs any) *routing.Routes {
		if r, _ := rs.(*Routes); r != nil {
			return r.t
		}
		return nil
	}
	routing.KeyContext = func(k any, ctx context.Context, r any) (context.Context, error) {
		kr, _ := k.(*Keyer)
		q, _ := r.(Request)
		return kr.keyContext(ctx, q)
	}
	routing.MissingKey = func(k any) string {
		kr, _ := k.(*Keyer)
		if kr == nil {
			return ""
		}
		if kr.missing.reject {
			return kr.noClient // set by keyhook.NoClient, or ""
		}
		return kr.missing.key
	}
	keyhook.NoClient = func(k any, key string) { k.(*Keyer).noClient = key }
}

// Close closes every distinct Guard of the table (sluice.Guard.Close), for
// shutting down together the Guards a server's routes map to. It returns
// their errors joined. A nil *Routes has nothing to close.
func (rs *Routes) Close() error {
	if rs == nil {
		return nil
	}
	var errs []error
	for _, g := range rs.t.Guards() {
		if err := g.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
