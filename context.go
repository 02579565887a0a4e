package sluice

import (
	"context"
	"sync/atomic"

	"github.com/sluice-go/sluice/internal/reqid"
)

type ctxKey uint8

const (
	costKey ctxKey = iota
	priorityKey
)

// WithKey returns a context whose requests are limited under key: a client
// IP, a user, a header value. Keyed policies read it with KeyFrom. Adapters
// set it from their key extractor. It costs one allocation.
func WithKey(ctx context.Context, key string) context.Context { return reqid.WithKey(ctx, key) }

// KeyFrom returns the key set by WithKey, and whether one was set.
func KeyFrom(ctx context.Context) (string, bool) { return reqid.Key(ctx) }

// WithResource returns a context naming the resource a request is for: an
// HTTP route pattern, a gRPC full method, a dependency's host. It costs one
// allocation.
func WithResource(ctx context.Context, resource string) context.Context {
	return reqid.WithResource(ctx, resource)
}

// ResourceFrom returns the resource set by WithResource, and whether one was
// set.
func ResourceFrom(ctx context.Context) (string, bool) { return reqid.Resource(ctx) }

// WithCost returns a context whose requests cost n units of a rate limit's
// quota instead of 1. A cost below 1 is taken as 1.
func WithCost(ctx context.Context, n int64) context.Context {
	if !costsSet.Load() {
		costsSet.Store(true)
	}
	return context.WithValue(ctx, costKey, n)
}

// costsSet and prioritiesSet tell whether WithCost and WithPriority have
// ever been called in this process: until then no context holds a cost or a
// priority, and a rate limit's decision, which asks for the cost of every
// request, need not walk the request's chain of contexts (three or four
// deep under net/http) to find none.
var costsSet, prioritiesSet atomic.Bool

// CostFrom returns the cost set by WithCost, or 1.
func CostFrom(ctx context.Context) int64 {
	if !costsSet.Load() {
		return 1
	}
	if n, ok := ctx.Value(costKey).(int64); ok && n > 0 {
		return n
	}
	return 1
}

// Priority orders requests for load shedding. The adaptive Shedder and
// bulkhead read it in their queue (adaptive.WithQueue): critical requests
// are served first, wait their whole maxWait, and turn a normal waiter out
// of a full queue; with no queue, priority changes nothing.
type Priority uint8

const (
	// PriorityNormal is the priority of a request that sets none.
	PriorityNormal Priority = iota
	// PriorityCritical marks health checks and core routes, shed last.
	PriorityCritical
)

// WithPriority returns a context whose requests carry priority p.
func WithPriority(ctx context.Context, p Priority) context.Context {
	if !prioritiesSet.Load() {
		prioritiesSet.Store(true)
	}
	return context.WithValue(ctx, priorityKey, p)
}

// PriorityFrom returns the priority set by WithPriority, or PriorityNormal.
func PriorityFrom(ctx context.Context) Priority {
	if !prioritiesSet.Load() {
		return PriorityNormal
	}
	p, _ := ctx.Value(priorityKey).(Priority)
	return p
}

func init() {
	reqid.Observed = func(g any) bool {
		ob := g.(*Guard).obs
		return ob != nil && len(ob.calls) > 0
	}
}
