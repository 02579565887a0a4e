// Package fallbackof runs a sluice.Guard's fallbacks for the adapters of
// this module, each of which answers with one type (an http.Handler, a gRPC
// message), as sluice.Execute runs them for its T.
package fallbackof

import (
	"context"
	"fmt"
	"reflect"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/isnil"
)

// NilAnswerError is Value's error for a fallback that answered nil: it
// names the fallback and wraps the call's error, which an adapter answers
// as if no fallback had declared an answer.
type NilAnswerError struct {
	name string
	typ  reflect.Type
	err  error
}

func (e *NilAnswerError) Error() string {
	return fmt.Sprintf("sluice: fallback %q answered a nil %v: %v", e.name, e.typ, e.err)
}

func (e *NilAnswerError) Unwrap() error { return e.err }

// nilAnswer reports whether v is no answer an adapter can send: nil, or a
// nil pointer, map, slice or func where T is one. A typed nil in an
// interface T (a nil *pb.Reply as any) is a value: gRPC sends it as the
// empty message.
func nilAnswer[T any](v T) bool {
	if reflect.TypeFor[T]().Kind() == reflect.Interface {
		return any(v) == nil
	}
	return isnil.Of(v)
}

// Value is the fallback layer of sluice.Execute for err, the error of a
// call of g: the first of g's fallbacks of type T (sluice.FallbackOf) that
// declares an answer for err gives it. It returns that answer and nil when
// the fallback serves, and the zero T with an error otherwise: the
// fallback's, when it declines; err itself when no fallback declares an
// answer. When none of type T declares one but a fallback of another type
// does, the error says so and wraps err. An answer that is nil (a nil
// handler, response or message, which an adapter cannot send) is a
// *NilAnswerError that wraps err, and the fallback is not counted as
// served. A nil g or
// err returns the zero T and err. It allocates nothing but what the
// fallback does.
func Value[T any](ctx context.Context, g *sluice.Guard, err error) (T, error) {
	var zero T
	if g == nil || err == nil {
		return zero, err
	}
	n := guardhook.NumFallbacks(g)
	for i := range n {
		fv, ok := guardhook.FallbackAt(g, i).(sluice.FallbackOf[T])
		if !ok {
			continue
		}
		v, name, out := fv.AnswerValue(ctx, err)
		if name == "" {
			continue
		}
		if out != nil {
			return zero, out
		}
		if nilAnswer(v) {
			return zero, &NilAnswerError{name: name, typ: reflect.TypeFor[T](), err: err}
		}
		guardhook.Served(g, ctx, name, err)
		return v, nil
	}
	for i := range n {
		f := guardhook.FallbackAt(g, i)
		if _, ok := f.(sluice.FallbackOf[T]); ok {
			continue
		}
		if name, ok := f.(sluice.Fallback).Declared(ctx, err); ok {
			return zero, guardhook.OtherTypeError(i, f, name, reflect.TypeFor[T](), err)
		}
	}
	return zero, err
}
