package sluicegrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// watchRetryConfig is retryConfig for the server-streaming Watch: grpc-go
// retries a stream too, as long as its answer is trailers-only.
const watchRetryConfig = `{"methodConfig": [{
	"name": [{"service": "grpc.health.v1.Health", "method": "Watch"}],
	"retryPolicy": {
		"maxAttempts": 3,
		"initialBackoff": "0.001s",
		"maxBackoff": "0.001s",
		"backoffMultiplier": 1,
		"retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]
	}
}]}`

// A stream's handler that returns a rejection before sending anything is
// answered trailers-only, WithQuotaMetadata or not: the admission's
// RateLimit fields, held back from the header, go with the trailers, and a
// grpc-go retryPolicy retries the stream.
func TestStreamHandlerRejectionWithQuotaMetadataIsRetried(t *testing.T) {
	for _, tapped := range []bool{false, true} {
		t.Run(fmt.Sprintf("tapped=%v", tapped), func(t *testing.T) {
			var calls atomic.Int64
			dep := sluice.Rejection(sluice.Decision{Policy: "breaker/dep", Cause: sluice.ErrCircuitOpen, RetryAfter: 20 * time.Millisecond, Limit: -1})
			g := mustGuard(t, sluice.With(quotaAdmitter{}))
			in := stream(t, WithGuard(g), WithQuotaMetadata())
			wrapped := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				return in(srv, ss, info, func(srv any, ss grpc.ServerStream) error {
					if calls.Add(1) == 1 {
						return dep // the stream's dependency's breaker is open
					}
					return h(srv, ss)
				})
			}
			var sopts []grpc.ServerOption
			if tapped {
				sopts = append(sopts, tapHandle(t, WithGuard(g)))
			}
			sopts = append(sopts, grpc.StreamInterceptor(wrapped))
			s := start(t, transports[0], sopts, grpc.WithDefaultServiceConfig(watchRetryConfig))
			n, err := s.watch(withTimeout(t))
			require.NoError(t, err, "the stream handler's rejection was not retried by the client's retryPolicy")
			assert.Equal(t, 1, n)
			assert.Equal(t, int64(2), calls.Load())
		})
	}
}

// A fallback that declines the Guard's timeout with a status error of its
// own, keeping the timeout as its cause, is answered with its status: only
// the timeout returned as it came becomes DeadlineExceeded.
func TestFallbacksOwnStatusWrappingTheTimeoutKeepsItsCode(t *testing.T) {
	fb, err := degrade.New(degrade.OnTimeout(func(_ context.Context, err error) (any, error) {
		return nil, fmt.Errorf("%w (cause: %w)", status.Error(codes.Unavailable, "slow replica: try the other region"), err)
	}))
	require.NoError(t, err)
	g := mustGuard(t, sluice.WithTimeout(10*time.Millisecond), sluice.WithFallback(fb))
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	_, err = unary(t, WithGuard(g))(context.Background(), nil, info, func(ctx context.Context, _ any) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	assert.Equal(t, codes.Unavailable, status.Code(err), "the fallback's own status was replaced: %v", err)
}

// A timeout the handler returns from a Guard of its own goes out as it is;
// a fallback of the route's Guard that declines it leaves that answer as
// it is, as no fallback would.
func TestDecliningFallbackLeavesTheHandlersOwnTimeoutAsItIs(t *testing.T) {
	fb, err := degrade.New(degrade.OnError(func(_ context.Context, err error) (any, error) {
		return nil, err // decline
	}))
	require.NoError(t, err)
	own := mustGuard(t, sluice.WithTimeout(5*time.Millisecond)) // the handler's own Guard
	handler := func(ctx context.Context, _ any) (any, error) {
		return nil, own.Do(ctx, func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
	}
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	_, plain := unary(t, WithGuard(mustGuard(t)))(context.Background(), nil, info, handler)
	_, withFB := unary(t, WithGuard(mustGuard(t, sluice.WithFallback(fb))))(context.Background(), nil, info, handler)
	require.Error(t, plain)
	assert.Equal(t, status.Code(plain), status.Code(withFB), "without a fallback %v; with a declining one %v", plain, withFB)
}

// A stream handler that sends its header through grpc.SendHeader on its
// context still carries the admission's RateLimit fields
// (WithQuotaMetadata): the context's transport stream releases them too.
func TestStreamHeaderSentThroughContextKeepsQuotaMetadata(t *testing.T) {
	for _, tapped := range []bool{false, true} {
		t.Run(fmt.Sprintf("tapped=%v", tapped), func(t *testing.T) {
			g := mustGuard(t, sluice.With(quotaAdmitter{}))
			in := stream(t, WithGuard(g), WithQuotaMetadata())
			wrapped := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				return in(srv, ss, info, func(srv any, ss grpc.ServerStream) error {
					if err := grpc.SendHeader(ss.Context(), metadata.Pairs("x-own", "1")); err != nil {
						return err
					}
					return h(srv, ss)
				})
			}
			var sopts []grpc.ServerOption
			if tapped {
				sopts = append(sopts, tapHandle(t, WithGuard(g)))
			}
			sopts = append(sopts, grpc.StreamInterceptor(wrapped))
			s := start(t, transports[0], sopts)
			st, err := healthpb.NewHealthClient(s.conn).Watch(withTimeout(t), &healthpb.HealthCheckRequest{})
			require.NoError(t, err)
			for {
				if _, err := st.Recv(); err != nil {
					require.True(t, errors.Is(err, io.EOF), "%v", err)
					break
				}
			}
			hdr, err := st.Header()
			require.NoError(t, err)
			assert.Equal(t, []string{"1"}, hdr.Get("x-own"))
			assert.NotEmpty(t, hdr.Get(MetadataRateLimit), "the admission's quota fields were lost: header %v, trailer %v", hdr, st.Trailer())
		})
	}
}

// A stream handler that panics, recovered by an interceptor outside this
// one, keeps the admission's quota fields, as a unary call does.
func TestStreamHandlerPanicKeepsQuotaMetadata(t *testing.T) {
	g := mustGuard(t, sluice.With(quotaAdmitter{}))
	in := stream(t, WithGuard(g), WithQuotaMetadata())
	recovering := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = status.Error(codes.Internal, "panic")
			}
		}()
		return in(srv, ss, info, func(srv any, ss grpc.ServerStream) error {
			panic("boom")
		})
	}
	s := start(t, transports[0], []grpc.ServerOption{grpc.StreamInterceptor(recovering)})
	st, err := healthpb.NewHealthClient(s.conn).Watch(withTimeout(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = st.Recv()
	require.Equal(t, codes.Internal, status.Code(err), "%v", err)
	hdr, _ := st.Header()
	md := metadata.Join(hdr, st.Trailer())
	assert.NotEmpty(t, md.Get(MetadataRateLimit), "the admission's quota fields were lost on a panic: header %v, trailer %v", hdr, st.Trailer())
}
