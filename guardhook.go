package sluice

import (
	"context"
	"reflect"
	"time"

	"github.com/sluice-go/sluice/internal/guardhook"
)

func init() {
	guardhook.RetryDelay = func(g any, ctx context.Context, attempts int, began time.Time, atLeast time.Duration) (time.Duration, bool) {
		return g.(*Guard).retryDelay(ctx, attempts, began, atLeast)
	}
	guardhook.Fallbacks = func(g any) any { return g.(*Guard).fallbackList() }
	guardhook.FallbackLayer = func(g any, ctx context.Context, err error, is func(any) bool, ask func(any) (bool, string, error), typ func() reflect.Type) (bool, error) {
		return g.(*Guard).fallbackLayer(ctx, err,
			func(f Fallback) bool { return is(f) },
			func(f Fallback) (bool, string, error) { return ask(f) }, typ)
	}
}
