// Package reqid carries a request's key and resource in its context, for
// sluice.WithKey, sluice.WithResource and the adapters that set both in one
// allocation.
package reqid

import (
	"context"
	"sync/atomic"
)

type ctxKey uint8

const (
	keyKey ctxKey = iota
	resourceKey
)

const (
	hasKey uint8 = 1 << iota
	hasResource
)

// idCtx carries a request's key, its resource, or both, in one value: the
// key and the resource are read back without the allocation a string in an
// interface would cost, as its Value answers with the idCtx itself.
type idCtx struct {
	context.Context
	key, res string
	has      uint8
	lent     bool // Lend made it, and it may go back to the pool
}

func (c *idCtx) Value(k any) any {
	switch k {
	case keyKey:
		if c.has&hasKey != 0 {
			return c
		}
	case resourceKey:
		if c.has&hasResource != 0 {
			return c
		}
	}
	return c.Context.Value(k)
}

// WithKey returns a context carrying key, in one allocation.
func WithKey(ctx context.Context, key string) context.Context {
	return &idCtx{Context: ctx, key: key, has: hasKey}
}

// WithResource returns a context carrying resource, in one allocation.
func WithResource(ctx context.Context, resource string) context.Context {
	return &idCtx{Context: ctx, res: resource, has: hasResource}
}

// WithKeyAndResource is WithKey and WithResource at once, in one allocation.
func WithKeyAndResource(ctx context.Context, key, resource string) context.Context {
	return &idCtx{Context: ctx, key: key, res: resource, has: hasKey | hasResource}
}

// IsResourceKey reports whether k is the context key a resource is read
// by, for a test that watches which values a policy reads.
func IsResourceKey(k any) bool {
	ck, ok := k.(ctxKey)
	return ok && ck == resourceKey
}

// Key returns the key that ctx carries, and whether it carries one.
func Key(ctx context.Context) (string, bool) {
	if c := find(ctx, keyKey, hasKey); c != nil {
		return c.key, true
	}
	return "", false
}

// Resource returns the resource that ctx carries, and whether it carries
// one.
func Resource(ctx context.Context) (string, bool) {
	if c := find(ctx, resourceKey, hasResource); c != nil {
		return c.res, true
	}
	return "", false
}

// find returns the idCtx that answers k in ctx, which has the flag has;
// nil when none does. ctx itself is looked at first, without a Value call.
func find(ctx context.Context, k ctxKey, has uint8) *idCtx {
	if c, ok := ctx.(*idCtx); ok && c.has&has != 0 {
		return c
	}
	c, _ := ctx.Value(k).(*idCtx)
	return c
}

// spare is a context GiveBack took back, for the next Lend; nil when none.
// One is enough for a flood of rejections on one core; on several, a Lend
// that finds none makes one. Lend reads it before it takes it, so that
// a flow of admitted calls, which never give one back, only reads it.
var spare atomic.Pointer[idCtx]

// Lend is WithResource for a call that its Guard may reject before anything
// keeps its context: GiveBack takes the context back for the next Lend, so
// that a flood of rejections allocates nothing. A context that is not
// given back costs one allocation, as WithResource's does.
func Lend(ctx context.Context, resource string) context.Context {
	c := spare.Load()
	if c == nil || !spare.CompareAndSwap(c, nil) {
		c = new(idCtx)
	}
	c.Context, c.res, c.has, c.lent = ctx, resource, hasResource, true
	return c
}

// Keep claims ctx, made by Lend, for good: GiveBack leaves it alone. A
// call keeps its context once it is handed to code that may hold on to it.
func Keep(ctx context.Context) context.Context {
	if c, ok := ctx.(*idCtx); ok {
		c.lent = false
	}
	return ctx
}

// GiveBack returns ctx, made by Lend and not claimed by Keep, for the next Lend,
// when g, the *sluice.Guard that rejected the call begun with ctx, has
// handed it to nothing that may keep it (Observed). Nothing may use ctx
// afterwards.
func GiveBack(ctx context.Context, g any) {
	c, ok := ctx.(*idCtx)
	if !ok || !c.lent || Observed(g) {
		return
	}
	*c = idCtx{}
	spare.Store(c)
}

// Observed reports whether g, a *sluice.Guard, hands the context of a call
// it rejects to observers, which may keep it. The sluice package sets it
// when it is initialised.
var Observed func(g any) bool
