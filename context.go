package sluice

import "context"

type ctxKey uint8

const (
	keyKey ctxKey = iota
	resourceKey
	costKey
	priorityKey
)

// WithKey returns a context whose requests are limited under key: a client
// IP, a user, a header value. Keyed policies read it with KeyFrom. Adapters
// set it from their key extractor. It costs one allocation.
func WithKey(ctx context.Context, key string) context.Context {
	return &idCtx{Context: ctx, key: key, has: hasKey}
}

// KeyFrom returns the key set by WithKey or WithKeyAndResource, and whether
// one was set.
func KeyFrom(ctx context.Context) (string, bool) {
	if c, ok := ctx.(*idCtx); ok && c.has&hasKey != 0 {
		return c.key, true
	}
	if c, ok := ctx.Value(keyKey).(*idCtx); ok {
		return c.key, true
	}
	return "", false
}

// WithResource returns a context naming the resource a request is for: an
// HTTP route pattern, a gRPC full method, a dependency's host. It costs one
// allocation.
func WithResource(ctx context.Context, resource string) context.Context {
	return &idCtx{Context: ctx, res: resource, has: hasResource}
}

// WithKeyAndResource is WithKey and WithResource at once, in one allocation.
func WithKeyAndResource(ctx context.Context, key, resource string) context.Context {
	return &idCtx{Context: ctx, key: key, res: resource, has: hasKey | hasResource}
}

// ResourceFrom returns the resource set by WithResource or
// WithKeyAndResource, and whether one was set.
func ResourceFrom(ctx context.Context) (string, bool) {
	if c, ok := ctx.(*idCtx); ok && c.has&hasResource != 0 {
		return c.res, true
	}
	if c, ok := ctx.Value(resourceKey).(*idCtx); ok {
		return c.res, true
	}
	return "", false
}

// idCtx carries a request's key, its resource, or both, in one value: the
// key and the resource are read back without the allocation a string in an
// interface would cost, as its Value answers with the idCtx itself.
type idCtx struct {
	context.Context
	key, res string
	has      uint8
}

const (
	hasKey uint8 = 1 << iota
	hasResource
)

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

// WithCost returns a context whose requests cost n units of a rate limit's
// quota instead of 1. A cost below 1 is taken as 1.
func WithCost(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, costKey, n)
}

// CostFrom returns the cost set by WithCost, or 1.
func CostFrom(ctx context.Context) int64 {
	if n, ok := ctx.Value(costKey).(int64); ok && n > 0 {
		return n
	}
	return 1
}

// Priority orders requests for load shedding: under overload the guard sheds
// PriorityNormal requests first and PriorityCritical ones only at a higher
// threshold.
type Priority uint8

const (
	// PriorityNormal is the priority of a request that sets none.
	PriorityNormal Priority = iota
	// PriorityCritical marks health checks and core routes, shed last.
	PriorityCritical
)

// WithPriority returns a context whose requests carry priority p.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey, p)
}

// PriorityFrom returns the priority set by WithPriority, or PriorityNormal.
func PriorityFrom(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey).(Priority)
	return p
}
