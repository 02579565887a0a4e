// Package listen calls the listeners of the policies' state changes, so
// that one that panics costs the others nothing: every listener hears every
// change queued, and the panic is raised again once all have.
package listen

import "github.com/sluice-go/sluice"

// First keeps the first panic of a delivery, to raise once it is over.
type First struct{ v any }

// Call calls fn with c, and keeps what it panicked with if it is the
// first panic.
func (f *First) Call(fn func(sluice.StateChange), c sluice.StateChange) {
	defer func() {
		if p := recover(); p != nil && f.v == nil {
			f.v = p
		}
	}()
	fn(c)
}

// Raise panics with the first panic kept, if any.
func (f *First) Raise() {
	if f.v != nil {
		panic(f.v)
	}
}
