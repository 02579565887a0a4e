package sluicegrpc

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

// A call whose client went away mid-call is Ignored, and no fallback
// answers it, as in the HTTP adapters: nobody is there to read the answer,
// and Stats.Fallbacks and the OnFallback observers count none.
func TestUnaryClientGoneIsAnsweredByNoFallback(t *testing.T) {
	fb, err := degrade.New(degrade.OnError(degrade.Value[any]("fallback")))
	require.NoError(t, err)
	counter := testpolicy.NewCounter()
	served := 0
	g, err := sluice.New(sluice.With(counter), sluice.WithFallback(fb),
		sluice.OnFallback(func(context.Context, sluice.FallbackEvent) { served++ }))
	require.NoError(t, err)
	intercept := unary(t, WithGuard(g))
	const method = "/sluice.test.Service/A"
	ctx, cancel := context.WithCancel(grpc.NewContextWithServerTransportStream(context.Background(), &headerStream{method: method}))
	defer cancel()
	resp, err := intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
		cancel() // the client goes away; the proxied upstream call fails with it
		return nil, status.Error(codes.Unavailable, "upstream: context canceled")
	})
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, counter.Outcomes())
	assert.Zero(t, served, "a fallback answered a call whose client had gone (resp %v, err %v)", resp, err)
}

// Nor does one answer the Guard's own rejection of a call whose client has
// gone by the time it is admitted.
func TestUnaryRejectionOfAClientGoneIsAnsweredByNoFallback(t *testing.T) {
	fb, err := degrade.New(degrade.OnRejected(degrade.Value[any]("fallback")))
	require.NoError(t, err)
	served := 0
	g, err := sluice.New(sluice.With(testpolicy.Rejecter{D: sluice.Decision{Policy: "p", Limit: -1, Cause: sluice.ErrOverloaded}}),
		sluice.WithFallback(fb), sluice.OnFallback(func(context.Context, sluice.FallbackEvent) { served++ }))
	require.NoError(t, err)
	intercept := unary(t, WithGuard(g))
	const method = "/sluice.test.Service/A"
	ctx, cancel := context.WithCancel(grpc.NewContextWithServerTransportStream(context.Background(), &headerStream{method: method}))
	cancel()
	_, err = intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
		t.Fatal("ran")
		return nil, nil
	})
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Zero(t, served)
}
