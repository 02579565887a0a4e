package sluicegrpc

import (
	"context"
	"fmt"
	"slices"
	"sync"
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
