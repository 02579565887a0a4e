package gobreakeradapter_test

import (
	"context"
	"testing"

	"github.com/sony/gobreaker/v2"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker/gobreakeradapter"
)

// BenchmarkGuardGobreaker is a request through a Guard with a closed
// gobreaker breaker.
func BenchmarkGuardGobreaker(b *testing.B) {
	p, err := gobreakeradapter.New(gobreaker.Settings{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	g, err := sluice.New(sluice.With(p))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		_ = g.Do(ctx, fn)
	}
}
