// Package isnil tells an interface value that holds nothing usable: nil
// itself, or a nil pointer, map, slice, channel or function, which a
// constructor must refuse rather than fail on at first use.
package isnil

import "reflect"

// Of reports whether v is nil, or holds a nil pointer, map, slice,
// channel, function or interface.
func Of(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return r.IsNil()
	}
	return false
}

// modulePrefix is the import path of this module's packages, and what
// Unmade recognises their types by.
const modulePrefix = "github.com/sluice-go/sluice/"

// Unmade reports whether v points to the zero value of a struct type of
// this module: a degrade.Fallbacks, Stale or a middleware.StaleCache made
// as a composite literal instead of by its constructor, which every one of
// them needs (a zero Fallbacks never answers, a zero Stale fails at first
// use).
func Unmade(v any) bool {
	r := reflect.ValueOf(v)
	if r.Kind() != reflect.Pointer || r.IsNil() {
		return false
	}
	e := r.Elem()
	if e.Kind() != reflect.Struct {
		return false
	}
	pkg := e.Type().PkgPath()
	return len(pkg) > len(modulePrefix) && pkg[:len(modulePrefix)] == modulePrefix && e.IsZero()
}
