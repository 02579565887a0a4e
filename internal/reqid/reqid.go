// Package reqid carries a request's key and resource in its context, for
// sluice.WithKey, sluice.WithResource and the adapters that set both in one
// allocation.
package reqid

import "context"

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
