package sluice

import (
	"context"
	"time"

	"github.com/sluice-go/sluice/internal/guardhook"
)

func init() {
	guardhook.RetryDelay = func(g any, ctx context.Context, attempts int, began time.Time, atLeast time.Duration) (time.Duration, bool) {
		return g.(*Guard).retryDelay(ctx, attempts, began, atLeast)
	}
	guardhook.Fallbacks = func(g any) any { return g.(*Guard).fallbackList() }
}
