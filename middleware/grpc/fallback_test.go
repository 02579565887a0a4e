package sluicegrpc

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// openFallback is a Guard's fallback that answers the rejections of an open
// circuit with "fallback for " and the rejecting policy's name.
func openFallback(t testing.TB) sluice.Fallback {
	fb, err := degrade.New(degrade.OnCircuitOpen(func(_ context.Context, err error) (any, error) {
		d, _ := sluice.RejectionOf(err)
		return "fallback for " + d.Policy, nil
	}))
	require.NoError(t, err)
	return fb
}

// A Guard's fallback answering a message answers a rejected unary call
// over the wire, and its OnFallback observer hears of it. A typed nil
// message is one too: protobuf marshals a nil *HealthCheckResponse as the
// empty one, as when a handler returns it.
func TestGuardFallbackAnswersARejectedUnaryCall(t *testing.T) {
	for name, answer := range map[string]*healthpb.HealthCheckResponse{
		"message":   {Status: healthpb.HealthCheckResponse_NOT_SERVING},
		"typed nil": nil,
	} {
		t.Run(name, func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, tr transport) {
				shed := &refuser{name: "adaptive/cpu", cause: sluice.ErrOverloaded, retry: time.Second}
				fb, err := degrade.New(degrade.OnOverloaded(func(context.Context, error) (any, error) { return answer, nil }))
				require.NoError(t, err)
				served := make(chan sluice.FallbackEvent, 1)
				g := mustGuard(t, sluice.With(shed), sluice.WithFallback(fb),
					sluice.OnFallback(func(_ context.Context, ev sluice.FallbackEvent) { served <- ev }))
				s := start(t, tr, []grpc.ServerOption{grpc.UnaryInterceptor(unary(t, WithGuard(g)))})
				resp, err := healthpb.NewHealthClient(s.conn).Check(withTimeout(t), &healthpb.HealthCheckRequest{})
				require.NoError(t, err)
				assert.Equal(t, answer.GetStatus(), resp.GetStatus())
				assert.Zero(t, s.health.calls.Load())
				ev := <-served
				assert.Equal(t, "adaptive/cpu", ev.Policy)
				assert.Equal(t, sluice.CauseOverloaded, ev.Cause)
			})
		})
	}
}

// A fallback that answers nothing (nil, nil: its map had no message for
// the method) leaves the call the answer it gets with no fallback, the
// handler's status or the Guard's timeout, not the fallback's own error.
func TestFallbackAnsweringNilLeavesTheHandlersStatus(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	timesOut := func(ctx context.Context, _ any) (any, error) {
		<-ctx.Done() // the Guard's deadline
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	fails := func(context.Context, any) (any, error) { return nil, status.Error(codes.Unavailable, "down") }
	nothing := func(context.Context, error) (any, error) { return nil, nil }
	for name, tc := range map[string]struct {
		rule    degrade.Rule[any]
		handler grpc.UnaryHandler
	}{
		"timeout": {degrade.OnTimeout(nothing), timesOut},
		"error":   {degrade.OnError(nothing), fails},
	} {
		t.Run(name, func(t *testing.T) {
			fb, err := degrade.New(tc.rule)
			require.NoError(t, err)
			bare := mustGuard(t, sluice.WithTimeout(time.Millisecond))
			_, want := unary(t, WithGuard(bare))(context.Background(), nil, info, tc.handler)
			g := mustGuard(t, sluice.WithTimeout(time.Millisecond), sluice.WithFallback(fb))
			_, got := unary(t, WithGuard(g))(context.Background(), nil, info, tc.handler)
			assert.Equal(t, status.Code(want), status.Code(got))
			assert.Equal(t, status.Convert(want).Message(), status.Convert(got).Message())
		})
	}
}

// A slow lookup that finds the resource gone returns NotFound just past
// the Guard's deadline: it is that NotFound, as net/http sends a 404
// written past the deadline and Echo renders one, not the timeout
// fallback's answer (a deleted resource's stale copy), nor a Failure that
// trips the breakers.
func TestANotFoundPastTheDeadlineIsNotAnsweredByTheFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testpolicy.NewCounter()
		fb, err := degrade.New(degrade.OnTimeout(func(context.Context, error) (any, error) { return "stale copy", nil }))
		require.NoError(t, err)
		g := mustGuard(t, sluice.With(c), sluice.WithFallback(fb), sluice.WithTimeout(time.Second))
		info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
		handler := func(ctx context.Context, _ any) (any, error) {
			<-ctx.Done() // a slow lookup
			return nil, status.Error(codes.NotFound, "no such user")
		}
		resp, err := unary(t, WithGuard(g))(context.Background(), nil, info, handler)
		assert.Nil(t, resp, "a deleted user's stale copy is served")
		assert.Equal(t, codes.NotFound, status.Code(err))
		assert.Zero(t, c.Outcomes()[sluice.Failure], "a NotFound counted a failure: %v", c.Outcomes())
	})
}
