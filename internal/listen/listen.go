// Package listen calls the listeners of the policies' state changes, so
// that one that panics costs the others nothing: every listener hears every
// change queued, and the panic is raised again once all have.
package listen

import "github.com/sluice-go/sluice"

// Call calls fn with c and returns what it panicked with; nil if it did
// not.
func Call(fn func(sluice.StateChange), c sluice.StateChange) (panicked any) {
	defer func() { panicked = recover() }()
	fn(c)
	return nil
}

// First keeps the first panic of a delivery, to raise once it is over.
type First struct{ v any }

// Call is the package's Call, keeping the first panic.
func (f *First) Call(fn func(sluice.StateChange), c sluice.StateChange) {
	if p := Call(fn, c); p != nil && f.v == nil {
		f.v = p
	}
}

// Raise panics with the first panic kept, if any.
func (f *First) Raise() {
	if f.v != nil {
		panic(f.v)
	}
}
