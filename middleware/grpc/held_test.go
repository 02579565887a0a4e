package sluicegrpc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// recoverPanics is a recovery interceptor, as servers put in front of
// their others: a handler's panic ends the call with Internal.
func recoverPanics(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Error(codes.Internal, fmt.Sprint(r))
		}
	}()
	return handler(ctx, req)
}

// panics is the innermost interceptor: it panics in place of the handler.
func panics(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
	panic("boom")
}

// A handler that panics, behind a recovery interceptor, still gets the
// admission's quota metadata, as any other failed call does: it is not
// left held back.
func TestHeldQuotaIsSentWhenTheHandlerPanics(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		for _, tapped := range []bool{false, true} {
			for _, inner := range []bool{false, true} {
				t.Run(fmt.Sprintf("tapped=%v inner=%v", tapped, inner), func(t *testing.T) {
					clk := sluice.NewManualClock(0)
					g := mustGuard(t, sluice.WithClock(clk), sluice.With(fixedWindow(t, "ratelimit/q", 5, time.Minute, clk)))
					route := g // the interceptor's Guard: the tap's, or an inner one
					if inner {
						route = mustGuard(t, sluice.WithClock(clk), sluice.With(fixedWindow(t, "ratelimit/q", 5, time.Minute, clk)))
					}
					var sopts []grpc.ServerOption
					if tapped {
						sopts = append(sopts, tapHandle(t, WithGuard(g)))
					}
					sopts = append(sopts, grpc.ChainUnaryInterceptor(recoverPanics, unary(t, WithGuard(route), WithQuotaMetadata()), panics))
					s := start(t, tr, sopts)
					var hdr metadata.MD
					err := s.check(withTimeout(t), grpc.Header(&hdr))
					assert.Equal(t, codes.Internal, status.Code(err))
					p, l, ok := quota(t, hdr)
					require.True(t, ok, "no quota metadata: %v", hdr)
					q, _ := p.Int("q")
					r, _ := l.Int("r")
					assert.Equal(t, []int64{5, 4}, []int64{q, r})
				})
			}
		}
	})
}

// orderStream is a transport stream that notes the order of the header
// metadata set and sent on it; setting metadata with key "block" waits for
// unblock.
type orderStream struct {
	headerStream
	mu      sync.Mutex
	events  []string
	entered chan struct{}
	unblock chan struct{}
}

func (s *orderStream) SetHeader(md metadata.MD) error {
	if len(md.Get(MetadataRateLimit)) > 0 {
		close(s.entered)
		<-s.unblock
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range md {
		s.events = append(s.events, "set "+k)
	}
	return nil
}

func (s *orderStream) SendHeader(metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, "send")
	return nil
}

// A handler whose goroutines set and send headers at once still sends the
// held quota with the header: sending it waits for the quota being set by
// the other goroutine.
func TestHeldQuotaGoesOutBeforeAConcurrentSendHeader(t *testing.T) {
	clk := sluice.NewManualClock(0)
	g := mustGuard(t, sluice.WithClock(clk), sluice.With(fixedWindow(t, "ratelimit/q", 5, time.Minute, clk)))
	i := unary(t, WithGuard(g), WithQuotaMetadata())
	st := &orderStream{headerStream: headerStream{method: methodCheck}, entered: make(chan struct{}), unblock: make(chan struct{})}
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), st)
	_, err := i(ctx, nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, func(ctx context.Context, _ any) (any, error) {
		var wg sync.WaitGroup
		wg.Go(func() { _ = grpc.SetHeader(ctx, metadata.Pairs("a", "1")) })
		<-st.entered // the quota is being set
		wg.Go(func() { _ = grpc.SendHeader(ctx, nil) })
		time.Sleep(50 * time.Millisecond)
		close(st.unblock)
		wg.Wait()
		return nil, nil
	})
	require.NoError(t, err)
	st.mu.Lock()
	defer st.mu.Unlock()
	require.Len(t, st.events, 4)
	// The handler's own "a" may be set before or after the send, as its two
	// goroutines race; the quota is set before it.
	send := slices.Index(st.events, "send")
	require.GreaterOrEqual(t, send, 0, "%v", st.events)
	for _, k := range []string{MetadataRateLimitPolicy, MetadataRateLimit} {
		set := slices.Index(st.events, "set "+k)
		require.GreaterOrEqual(t, set, 0, "%v", st.events)
		assert.Less(t, set, send, "the header went out before the quota was set: %v", st.events)
	}
}

// quotaAdmitter admits every call with a quota, so that WithQuotaMetadata
// has RateLimit fields to send on admitted calls.
type quotaAdmitter struct{}

func (quotaAdmitter) Name() string        { return "ratelimit/quota" }
func (quotaAdmitter) Needs() sluice.Needs { return 0 }
func (quotaAdmitter) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: 100, Remaining: 99, Reset: time.Second}, nil
}
func (quotaAdmitter) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

// A rejection is trailers-only, so that a grpc-go client with a
// retryPolicy retries it after the pushback, a handler's returned rejection
// too. With WithQuotaMetadata, the admission's RateLimit fields held back
// for the handler go with the trailers when it returns a rejection without
// a quota of its own (a dependency's open breaker): in a header, the
// answer would not be trailers-only, and grpc-go would not retry it.
func TestHandlerRejectionWithQuotaMetadataIsStillRetriedByARetryPolicy(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		var calls atomic.Int64
		dep := sluice.Rejection(sluice.Decision{Policy: "breaker/dep", Cause: sluice.ErrCircuitOpen, RetryAfter: 20 * time.Millisecond, Limit: -1})
		g := mustGuard(t, sluice.With(quotaAdmitter{}))
		in := unary(t, WithGuard(g), WithQuotaMetadata())
		// The first call's handler meets its dependency's open breaker.
		wrapped := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return in(ctx, req, info, func(ctx context.Context, req any) (any, error) {
				if calls.Add(1) == 1 {
					return nil, dep
				}
				return h(ctx, req)
			})
		}
		s := start(t, tr, []grpc.ServerOption{grpc.UnaryInterceptor(wrapped)}, grpc.WithDefaultServiceConfig(retryConfig))
		err := s.check(withTimeout(t))
		require.NoError(t, err, "the handler's rejection was not retried by the client's retryPolicy")
		assert.Equal(t, int64(2), calls.Load())
	})
}

// A rejection the handler returns comes from another Guard (its
// dependency's): its RateLimit-Policy field does not take the window of a
// policy of the same name in the route's Guard ("ratelimit/fixed-window",
// a default name, w=60 for a quota of 1 over 1s).
func TestHandlerRejectionQuotaNamesItsOwnWindow(t *testing.T) {
	clk := sluice.NewManualClock(0)
	route := mustGuard(t, sluice.WithClock(clk), sluice.With(fixedWindow(t, "ratelimit/fixed-window", 100, time.Minute, clk)))
	dep := mustGuard(t, sluice.WithClock(clk), sluice.With(fixedWindow(t, "ratelimit/fixed-window", 1, time.Second, clk)))
	require.NoError(t, dep.Do(context.Background(), func(context.Context) error { return nil }))

	hs := &headerStream{method: methodCheck}
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), hs)
	_, err := unary(t, WithGuard(route))(ctx, nil, &grpc.UnaryServerInfo{FullMethod: methodCheck},
		func(ctx context.Context, _ any) (any, error) {
			return nil, dep.Do(ctx, func(context.Context) error { return nil })
		})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	pol, _, ok := quota(t, hs.trailer)
	require.True(t, ok, "no quota trailers: %v", hs.trailer)
	q := pol.Params["q"]
	w, hasW := pol.Params["w"]
	assert.Equal(t, int64(1), q, "the dependency's quota")
	assert.False(t, hasW, "the window of the route's same-named policy: %v (w=%v)", hs.trailer, w)
}
