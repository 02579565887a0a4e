package sluicegrpc

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
)

// A fallback is user code run after the handler returned, before the held
// quota fields are settled: when it panics, they go out, as when the
// handler or the classifier does.
func TestAFallbackPanicKeepsTheHeldQuota(t *testing.T) {
	recov := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = status.Error(codes.Internal, "recovered")
			}
		}()
		return h(ctx, req)
	}
	fb, err := degrade.New(degrade.OnError(func(context.Context, error) (any, error) { panic("fallback bug") }))
	require.NoError(t, err)
	g := mustGuard(t, sluice.With(fixedWindow(t, "ratelimit/q", 10, time.Minute, nil)), sluice.WithFallback(fb))
	in := unary(t, WithGuard(g), WithQuotaMetadata())
	s := start(t, transports[0], []grpc.ServerOption{grpc.ChainUnaryInterceptor(recov, in)})
	var hdr metadata.MD
	err = s.check(withCode(withTimeout(t), codes.Aborted), grpc.Header(&hdr))
	require.Error(t, err)
	assert.NotEmpty(t, hdr.Get(MetadataRateLimitPolicy), "a panicking fallback lost the admission's quota fields")
}
