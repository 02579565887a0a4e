// Package nowait marks the context of a call that a policy may not make
// wait: a Guard gives it to a policy in shadow mode that may wait (a
// Shaper, a Shedder with a queue), which then admits the call only if it
// can at once, and otherwise rejects it, taking nothing. A policy that
// only watches must not throttle the traffic it watches.
package nowait

import "context"

type key struct{}

// Context returns ctx marked.
func Context(ctx context.Context) context.Context { return context.WithValue(ctx, key{}, true) }

// Is reports whether ctx is marked.
func Is(ctx context.Context) bool { return ctx.Value(key{}) != nil }
