package sluicegrpc

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// gRPC runs a ServerInHandle on the connection's reading goroutine: a
// policy waiting there stops every stream of the connection. A Guard whose
// policy may wait (a Shaper) is refused.
func TestTapRefusesAGuardThatWaits(t *testing.T) {
	sh, err := ratelimit.NewShaper(ratelimit.PerSecond(10), time.Second)
	require.NoError(t, err)
	_, err = ServerInHandle(WithGuard(mustGuard(t, sluice.With(sh))))
	assert.ErrorContains(t, err, "may wait")
}

// WithQuotaMetadata holds the admission's quota back "until the handler
// sets or sends a header, or returns (or panics)": a classifier that panics
// after the handler returned does not lose it.
func TestAClassifierPanicKeepsTheHeldQuota(t *testing.T) {
	for _, panics := range []bool{false, true} {
		recov := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = status.Error(codes.Internal, "recovered")
				}
			}()
			return h(ctx, req)
		}
		cls := WithClassifier(func(err error) sluice.Outcome {
			if panics {
				panic("classifier bug")
			}
			return sluice.Failure
		})
		g := mustGuard(t, sluice.With(fixedWindow(t, "ratelimit/q", 10, time.Minute, nil)))
		in := unary(t, WithGuard(g), WithQuotaMetadata(), cls)
		s := start(t, transports[0], []grpc.ServerOption{grpc.ChainUnaryInterceptor(recov, in)})
		var hdr metadata.MD
		err := s.check(withCode(withTimeout(t), codes.Aborted), grpc.Header(&hdr))
		require.Error(t, err)
		assert.NotEmpty(t, hdr.Get(MetadataRateLimitPolicy), "classifier panics=%v: the admission's quota fields were lost", panics)
	}
}

// On a client stream whose caller cancels it, the classifier runs on a
// goroutine no caller owns (the context's AfterFunc, gRPC's OnFinish): its
// panic there must not end the process; the call ends as a Failure.
func TestAStreamClassifierPanicOffTheCallersGoroutineEndsTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 1)}
		in, err := StreamClientInterceptor(WithGuard(mustGuard(t, sluice.With(rec))),
			WithClassifier(func(error) sluice.Outcome { panic("classifier bug") }))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			return slowStream{}, nil
		}
		_, err = in(ctx, &grpc.StreamDesc{ServerStreams: true}, nil, "/pkg.Svc/Watch", streamer)
		require.NoError(t, err)
		cancel()
		synctest.Wait() // the AfterFunc's goroutine has run: a panic left in it would have ended the process
		assert.Equal(t, sluice.Failure, <-rec.ended)
	})
}
