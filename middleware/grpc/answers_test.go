package sluicegrpc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A handler that returns the rejection its client interceptor answered for
// a dependency gets the same answer as one returning the Guard's bare
// rejection: the rejection's trailers, the retry pushback among them.
func TestHandlerReturningAClientRejectionGetsItsTrailers(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := newBreaker(t, "dep", clk)
	b.ForceOpen()
	depGuard := mustGuard(t, sluice.WithClock(clk), sluice.With(b))
	client, err := UnaryClientInterceptor(WithGuard(depGuard))
	require.NoError(t, err)
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }

	i := unary(t, WithGuard(mustGuard(t)))
	run := func(handler grpc.UnaryHandler) *headerStream {
		hs := &headerStream{method: methodCheck}
		ctx := grpc.NewContextWithServerTransportStream(context.Background(), hs)
		_, err := i(ctx, nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, handler)
		require.Error(t, err)
		return hs
	}
	// The bare Guard rejection, as Guard.Do returns it.
	bare := run(func(ctx context.Context, _ any) (any, error) {
		return nil, depGuard.Do(ctx, func(context.Context) error { return nil })
	})
	require.NotEmpty(t, bare.trailer.Get(MetadataRetryPushback), "bare rejection: pushback trailer")
	// The same rejection, as the client interceptor answered it.
	viaClient := run(func(ctx context.Context, _ any) (any, error) {
		return nil, fmt.Errorf("get dep: %w", client(ctx, "/dep.Dep/Get", nil, nil, nil, invoke))
	})
	assert.Equal(t, bare.trailer.Get(MetadataRetryPushback), viaClient.trailer.Get(MetadataRetryPushback),
		"a client interceptor's rejection returned by the handler goes out without the pushback trailer")
}

// A fallback that declines a rejection (returns it) leaves it answered as
// any other, as the net/http middleware answers 429: its status and
// trailers, not codes.Unknown with the error's text.
func TestDecliningFallbackKeepsTheRejectionsStatus(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		limit := &refuser{name: "ratelimit/per-ip", cause: sluice.ErrRateLimited, retry: 2 * time.Second}
		fb, err := degrade.New(degrade.OnRateLimited(func(_ context.Context, err error) (any, error) {
			return nil, err // nothing cached: decline
		}))
		require.NoError(t, err)
		g := mustGuard(t, sluice.With(limit), sluice.WithFallback(fb))
		s := start(t, tr, []grpc.ServerOption{grpc.UnaryInterceptor(unary(t, WithGuard(g)))})
		var trailer metadata.MD
		err = s.check(withTimeout(t), grpc.Trailer(&trailer))
		st := status.Convert(err)
		assert.Equal(t, codes.ResourceExhausted, st.Code(), "status: %v", st)
		_, ok := RejectionOf(err)
		assert.True(t, ok, "RejectionOf reads no rejection out of %v", err)
		assert.NotEmpty(t, trailer.Get(MetadataRetryPushback), "no pushback trailer")
	})
}

// sliceCause is a rejection cause of a type that cannot be compared with
// ==, as a policy may return (the Guard takes care never to compare two).
type sliceCause struct{ keys []string }

func (e sliceCause) Error() string { return "rate limited for " + fmt.Sprint(e.keys) }
func (e sliceCause) Unwrap() error { return sluice.ErrRateLimited }

type sliceRejecter struct{}

func (sliceRejecter) Name() string        { return "ratelimit/multi" }
func (sliceRejecter) Needs() sluice.Needs { return 0 }
func (sliceRejecter) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1, RetryAfter: time.Second}, sliceCause{keys: []string{"a", "b"}}
}
func (sliceRejecter) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

// A rejection whose cause is of a type == cannot compare is answered the
// second time as the first, without a panic comparing two causes.
func TestUncomparableCauseIsAnswered(t *testing.T) {
	g := mustGuard(t, sluice.With(sliceRejecter{}))
	require.Error(t, g.Do(context.Background(), func(context.Context) error { return nil }))
	require.Error(t, g.Do(context.Background(), func(context.Context) error { return nil }), "the Guard itself copes")
	i := unary(t, WithGuard(g))
	for n := range 2 {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("rejection %d: the interceptor panicked: %v", n+1, p)
				}
			}()
			_, err := i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck},
				func(context.Context, any) (any, error) { return nil, nil })
			assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		}()
	}
}

// A server interceptor that answers a handler's rejection on a method it
// lets through unguarded sets its trailers: one outside it does not answer
// the rejection again, which would send the retry pushback twice (and
// grpc-go's client does not retry on two values).
func TestAnUnguardedMethodsAnswerIsNotAnsweredAgain(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := newBreaker(t, "dep", clk)
	b.ForceOpen()
	depGuard := mustGuard(t, sluice.WithClock(clk), sluice.With(b))

	outer := unary(t, WithGuard(mustGuard(t)))
	inner := unary(t, WithMethodGuard("/other.Svc/Method", mustGuard(t))) // methodCheck: unguarded
	handler := func(ctx context.Context, _ any) (any, error) {
		return nil, depGuard.Do(ctx, func(context.Context) error { return nil })
	}
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	hs := &headerStream{method: methodCheck}
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), hs)
	_, err := outer(ctx, nil, info, func(ctx context.Context, req any) (any, error) {
		return inner(ctx, req, info, handler)
	})
	require.Error(t, err)
	assert.Len(t, hs.trailer.Get(MetadataRetryPushback), 1,
		"the rejection was answered twice: trailers %v", hs.trailer)
}

// A rejection tells the window after a SetLimit, though its answer is
// kept while the Guard shares its rejection error (same retry and reset
// instants, same limit).
func TestARejectionTellsTheWindowAfterSetLimit(t *testing.T) {
	clk := sluice.NewManualClock(time.Hour + 5*time.Second)
	fw := fixedWindow(t, "ratelimit/q", 1, 10*time.Second, clk)
	route := mustGuard(t, sluice.WithClock(clk), sluice.With(fw))
	in := unary(t, WithGuard(route))
	window := func() int64 {
		hs := &headerStream{method: methodCheck}
		ctx := grpc.NewContextWithServerTransportStream(context.Background(), hs)
		_, err := in(ctx, nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, func(context.Context, any) (any, error) { return "ok", nil })
		require.Equal(t, codes.ResourceExhausted, status.Code(err))
		pol, _, ok := quota(t, hs.trailer)
		require.True(t, ok, "no quota trailers: %v", hs.trailer)
		w, _ := pol.Params["w"].(int64)
		return w
	}
	_, err := unary(t, WithGuard(route))(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, func(context.Context, any) (any, error) { return "ok", nil })
	require.NoError(t, err) // spends the window
	assert.Equal(t, int64(10), window())
	require.NoError(t, fw.SetLimit(1, 5*time.Second))
	assert.Equal(t, int64(5), window(), "the window after SetLimit")
}
