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
