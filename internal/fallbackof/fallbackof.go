// Package fallbackof runs a sluice.Guard's fallbacks for the adapters of
// this module, each of which answers with one type (an http.Handler, a gRPC
// message), as sluice.Execute runs them for its T.
package fallbackof

import (
	"context"
	"reflect"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
)

// Value is the fallback layer of sluice.Execute for err, the error of a
// call of g: the first of g's fallbacks of type T (sluice.FallbackOf) that
// declares an answer for err gives it. It returns that answer and nil when
// the fallback serves, and the zero T with an error otherwise: the
// fallback's, when it declines; err itself when no fallback declares an
// answer. When none of type T declares one but a fallback of another type
// does, the error says so and wraps err. A nil g or err returns the zero T
// and err.
func Value[T any](ctx context.Context, g *sluice.Guard, err error) (T, error) {
	var v T
	if g == nil || err == nil {
		return v, err
	}
	served, out := guardhook.FallbackLayer(g, ctx, err,
		func(f any) bool {
			_, ok := f.(sluice.FallbackOf[T])
			return ok
		},
		func(f any) (bool, string, error) {
			fv, ok := f.(sluice.FallbackOf[T])
			if !ok {
				return false, "", nil
			}
			a, name, out := fv.AnswerValue(ctx, err)
			if name != "" && out == nil {
				v = a
			}
			return true, name, out
		},
		reflect.TypeFor[T])
	if !served {
		var zero T
		return zero, out
	}
	return v, nil
}
