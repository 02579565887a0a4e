package sluicegrpc

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
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
// over the wire, and its OnFallback observer hears of it.
func TestGuardFallbackAnswersARejectedUnaryCall(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		shed := &refuser{name: "adaptive/cpu", cause: sluice.ErrOverloaded, retry: time.Second}
		fb, err := degrade.New(degrade.OnOverloaded(degrade.Value[any](
			&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING})))
		require.NoError(t, err)
		served := make(chan sluice.FallbackEvent, 1)
		g := mustGuard(t, sluice.With(shed), sluice.WithFallback(fb),
			sluice.OnFallback(func(_ context.Context, ev sluice.FallbackEvent) { served <- ev }))
		s := start(t, tr, []grpc.ServerOption{grpc.UnaryInterceptor(unary(t, WithGuard(g)))})
		resp, err := healthpb.NewHealthClient(s.conn).Check(withTimeout(t), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, resp.GetStatus())
		assert.Zero(t, s.health.calls.Load())
		ev := <-served
		assert.Equal(t, "adaptive/cpu", ev.Policy)
		assert.Equal(t, sluice.CauseOverloaded, ev.Cause)
	})
}

// The Guard's fallbacks answer what Execute's would: a timeout, a failure,
// by their declaration; one that declines answers with its status error;
// a rejection no fallback declares keeps its status and trailers.
func TestGuardFallbackAnswersAsExecuteDoes(t *testing.T) {
	fb, err := degrade.New(
		degrade.OnTimeout(degrade.Value[any]("partial")),
		degrade.OnRateLimited(func(context.Context, error) (any, error) {
			return nil, status.Error(codes.ResourceExhausted, "come back tomorrow")
		}),
		degrade.OnError(func(_ context.Context, err error) (any, error) {
			if status.Code(err) == codes.NotFound {
				return nil, err // declined: the handler's own answer
			}
			return "degraded", nil
		}),
	)
	require.NoError(t, err)
	rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 4)}
	g := mustGuard(t, sluice.With(rec), sluice.WithTimeout(time.Millisecond), sluice.WithFallback(fb))
	i := unary(t, WithGuard(g))
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	ctx := context.Background()

	resp, err := i(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
		<-ctx.Done() // the Guard's deadline
		return nil, status.FromContextError(ctx.Err()).Err()
	})
	require.NoError(t, err)
	assert.Equal(t, "partial", resp)
	assert.Equal(t, sluice.Failure, rec.next(t), "the timeout still counts")

	resp, err = i(ctx, nil, info, func(context.Context, any) (any, error) { return nil, status.Error(codes.Unavailable, "down") })
	require.NoError(t, err)
	assert.Equal(t, "degraded", resp)
	assert.Equal(t, sluice.Failure, rec.next(t))

	_, err = i(ctx, nil, info, func(context.Context, any) (any, error) { return nil, status.Error(codes.NotFound, "no such") })
	assert.Equal(t, codes.NotFound, status.Code(err))
	assert.Equal(t, sluice.Ignored, rec.next(t))

	limited := mustGuard(t, sluice.With(&refuser{name: "ratelimit/r", cause: sluice.ErrRateLimited}), sluice.WithFallback(fb))
	_, err = unary(t, WithGuard(limited))(ctx, nil, info, func(context.Context, any) (any, error) { panic("the handler ran") })
	assert.Equal(t, "come back tomorrow", status.Convert(err).Message(), "the fallback declined with its own status")

	onlyLimits, err := degrade.New(degrade.OnRateLimited(degrade.Value[any]("later")))
	require.NoError(t, err)
	shut := mustGuard(t, sluice.With(&refuser{name: "breaker/b", cause: sluice.ErrCircuitOpen}), sluice.WithFallback(onlyLimits))
	ks := &keptStream{}
	ks.ctx = grpc.NewContextWithServerTransportStream(ctx, transportStream{ks})
	_, err = unary(t, WithGuard(shut))(ks.ctx, nil, info, func(context.Context, any) (any, error) { panic("the handler ran") })
	assert.Equal(t, codes.Unavailable, status.Code(err), "no fallback declared for an open circuit")
	assert.Equal(t, []string{"1000"}, ks.trailer.Get(MetadataRetryPushback))
}

// A Guard's fallbacks that an interceptor cannot answer with make its
// constructor fail, saying what to declare: never skipped in silence.
func TestGuardFallbacksTheInterceptorCannotAnswerWith(t *testing.T) {
	g := mustGuard(t, sluice.WithFallback(openFallback(t)))
	strs, err := degrade.New(degrade.OnCircuitOpen(degrade.Value("text")))
	require.NoError(t, err)
	other := mustGuard(t, sluice.WithFallback(strs))

	_, err = UnaryServerInterceptor(WithGuard(g))
	require.NoError(t, err, "a message answers a unary call")
	for name, build := range map[string]func() error{
		"unary, another type": func() error { _, err := UnaryServerInterceptor(WithMethodGuard(methodCheck, other)); return err },
		"stream":              func() error { _, err := StreamServerInterceptor(WithGuard(g)); return err },
		"message guard": func() error {
			_, err := StreamServerInterceptor(WithGuard(mustGuard(t)), WithMessageGuard(g))
			return err
		},
		"unary client":  func() error { _, err := UnaryClientInterceptor(WithTargetGuard("dns:///x", g)); return err },
		"stream client": func() error { _, err := StreamClientInterceptor(WithGuard(g)); return err },
		"tap":           func() error { _, err := ServerInHandle(WithGuard(g)); return err },
	} {
		err := build()
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "fallback", name)
	}
}

// A Guard's own call timeout is answered with DeadlineExceeded; a fallback
// that declares an answer for it but declines (returns the error it was
// given, as degrade.OnError rules do for what they cannot degrade) leaves
// that answer as it is, not the handler's own code.
func TestDecliningFallbackKeepsTheTimeoutsDeadlineExceeded(t *testing.T) {
	fb, err := degrade.New(degrade.OnError(func(_ context.Context, err error) (any, error) {
		return nil, err // nothing to degrade to: decline
	}))
	require.NoError(t, err)
	g := mustGuard(t, sluice.WithTimeout(10*time.Millisecond), sluice.WithFallback(fb))
	plain := mustGuard(t, sluice.WithTimeout(10*time.Millisecond))
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	handler := func(ctx context.Context, _ any) (any, error) {
		<-ctx.Done() // the Guard's deadline; the upstream call it made failed
		return nil, status.Error(codes.Unavailable, "upstream: connection reset")
	}
	_, err = unary(t, WithGuard(plain))(context.Background(), nil, info, handler)
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "without a fallback: %v", err)

	_, err = unary(t, WithGuard(g))(context.Background(), nil, info, handler)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "with a declining fallback: %v (%T)", err, err)
}

// A typed nil message is a message gRPC sends (protobuf marshals a nil
// *HealthCheckResponse as the empty one), as a handler returning one does:
// a fallback answering one serves the call.
func TestFallbackAnsweringATypedNilMessageServes(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		shed := &refuser{name: "adaptive/cpu", cause: sluice.ErrOverloaded, retry: time.Second}
		fb, err := degrade.New(degrade.OnOverloaded(func(context.Context, error) (any, error) {
			var empty *healthpb.HealthCheckResponse
			return empty, nil
		}))
		require.NoError(t, err)
		served := make(chan sluice.FallbackEvent, 1)
		g := mustGuard(t, sluice.With(shed), sluice.WithFallback(fb),
			sluice.OnFallback(func(_ context.Context, ev sluice.FallbackEvent) { served <- ev }))
		s := start(t, tr, []grpc.ServerOption{grpc.UnaryInterceptor(unary(t, WithGuard(g)))})
		resp, err := healthpb.NewHealthClient(s.conn).Check(withTimeout(t), &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "the fallback's empty message answers")
		assert.Equal(t, healthpb.HealthCheckResponse_UNKNOWN, resp.GetStatus())
		assert.Len(t, served, 1)
	})
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
