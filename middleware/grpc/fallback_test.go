package sluicegrpc

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestFallbackAnswersARejectedUnaryCall(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		shed := &refuser{name: "adaptive/cpu", cause: sluice.ErrOverloaded, retry: time.Second}
		g := mustGuard(t, sluice.With(shed))
		var seen sluice.Decision
		degraded := func(_ context.Context, req any, d sluice.Decision) (any, error) {
			seen = d
			require.IsType(t, &healthpb.HealthCheckRequest{}, req)
			return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
		}
		s := start(t, tr, serverOpts(t, WithGuard(g), WithFallback(methodCheck, sluice.CauseOverloaded, degraded)))
		ctx := withTimeout(t)
		resp, err := healthpb.NewHealthClient(s.conn).Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, resp.GetStatus())
		assert.Equal(t, "adaptive/cpu", seen.Policy)
		assert.Zero(t, s.health.calls.Load())

		_, err = s.watch(ctx)
		assert.Equal(t, codes.Unavailable, status.Code(err), "streams have no fallback")
	})
}

func TestFallbackMostSpecificWins(t *testing.T) {
	answer := func(s string) Fallback {
		return func(context.Context, any, sluice.Decision) (any, error) { return s, nil }
	}
	i := unary(t,
		WithGuard(mustGuard(t, sluice.With(&refuser{name: "r", cause: sluice.ErrRateLimited}))),
		WithMethodGuard(methodWatch, mustGuard(t, sluice.With(&refuser{name: "o", cause: sluice.ErrCircuitOpen}))),
		WithMethodGuard("/a.B/C", mustGuard(t, sluice.With(&refuser{name: "o", cause: sluice.ErrCircuitOpen}))),
		WithMethodGuard("/a.B/D", mustGuard(t, sluice.With(&refuser{name: "o", cause: sluice.ErrOverloaded}))),
		WithFallback(methodCheck, sluice.CauseRateLimited, answer("method and cause")),
		WithFallback(methodCheck, sluice.CauseNone, answer("method")),
		WithFallback(methodWatch, sluice.CauseNone, answer("method, any cause")),
		WithFallback("", sluice.CauseCircuitOpen, answer("cause")),
		WithFallback("", sluice.CauseNone, answer("any")),
	)
	never := func(context.Context, any) (any, error) { panic("the handler ran") }
	for method, want := range map[string]string{
		methodCheck: "method and cause",
		methodWatch: "method, any cause",
		"/a.B/C":    "cause",
		"/a.B/D":    "any",
	} {
		resp, err := i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method}, never)
		require.NoError(t, err, method)
		assert.Equal(t, want, resp, method)
	}
}

func TestFallbackOptionIsValidated(t *testing.T) {
	fb := func(context.Context, any, sluice.Decision) (any, error) { return nil, nil }
	for _, opts := range [][]Option{
		{WithFallback(methodCheck, sluice.CauseNone, nil)},
		{WithFallback("Check", sluice.CauseNone, fb)},
		{WithFallback("", sluice.CauseNone, fb), WithFallback("", sluice.CauseNone, fb)},
	} {
		_, err := UnaryServerInterceptor(opts...)
		assert.Error(t, err)
	}
	_, err := UnaryClientInterceptor(WithFallback("", sluice.CauseNone, fb))
	assert.Error(t, err)
	_, err = ServerInHandle(WithFallback("", sluice.CauseNone, fb))
	assert.Error(t, err)
}
