package sluice_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/reqid"
)

type otherKey struct{}

// FuzzContextHelpers layers the context helpers, and contexts of other
// packages between them, in any order: each reader returns what the nearest
// layer that set it holds, and its default when none did.
func FuzzContextHelpers(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6}, "user", "GET /x", int64(3))
	f.Add([]byte{2, 1, 6, 0, 6, 1}, "", "", int64(0))
	f.Add([]byte{1, 5, 1, 0, 2, 2, 3, 3}, "k", "r", int64(-2))
	f.Fuzz(func(t *testing.T, ops []byte, key, res string, cost int64) {
		if len(ops) > 64 {
			return
		}
		ctx := context.Background()
		var wantKey, wantRes string
		var hasKey, hasRes bool
		wantCost, wantPrio := int64(1), sluice.PriorityNormal
		for i, op := range ops {
			k, r := key+strconv.Itoa(i), res+strconv.Itoa(i)
			switch op % 7 {
			case 0:
				ctx, wantKey, hasKey = sluice.WithKey(ctx, k), k, true
			case 1:
				ctx, wantRes, hasRes = sluice.WithResource(ctx, r), r, true
			case 2:
				ctx = reqid.WithKeyAndResource(ctx, k, r)
				wantKey, hasKey, wantRes, hasRes = k, true, r, true
			case 3:
				c := cost + int64(i)
				ctx = sluice.WithCost(ctx, c)
				wantCost = max(c, 1)
			case 4:
				p := sluice.Priority(op >> 7)
				ctx, wantPrio = sluice.WithPriority(ctx, p), p
			case 5:
				ctx = context.WithValue(ctx, otherKey{}, k)
			default:
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
			}
			if got, ok := sluice.KeyFrom(ctx); ok != hasKey || got != wantKey {
				t.Fatalf("after %v: KeyFrom = %q, %v; want %q, %v", ops[:i+1], got, ok, wantKey, hasKey)
			}
			if got, ok := sluice.ResourceFrom(ctx); ok != hasRes || got != wantRes {
				t.Fatalf("after %v: ResourceFrom = %q, %v; want %q, %v", ops[:i+1], got, ok, wantRes, hasRes)
			}
			if got := sluice.CostFrom(ctx); got != wantCost {
				t.Fatalf("after %v: CostFrom = %d, want %d", ops[:i+1], got, wantCost)
			}
			if got := sluice.PriorityFrom(ctx); got != wantPrio {
				t.Fatalf("after %v: PriorityFrom = %v, want %v", ops[:i+1], got, wantPrio)
			}
		}
	})
}
