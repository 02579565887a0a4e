package sluicegrpc

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/ratelimit"
	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// keptStream is the transport stream of a call that the rejection benchmarks
// and allocation tests hand the interceptors: it keeps the last header and
// trailer it is given, as gRPC's stream keeps them to send, without the
// copy gRPC's own makes, so that what is counted is the interceptor's work.
type keptStream struct {
	ctx     context.Context
	header  metadata.MD
	trailer metadata.MD
}

func (s *keptStream) Method() string                  { return methodCheck }
func (s *keptStream) SetHeader(md metadata.MD) error  { s.header = md; return nil }
func (s *keptStream) SendHeader(md metadata.MD) error { s.header = md; return nil }
func (s *keptStream) SetTrailer(md metadata.MD) {
	s.trailer = md
}
func (s *keptStream) Context() context.Context { return s.ctx }
func (s *keptStream) SendMsg(any) error        { return nil }
func (s *keptStream) RecvMsg(any) error        { return nil }

// transportStream shows a keptStream as a unary call's
// grpc.ServerTransportStream, whose SetTrailer returns an error.
type transportStream struct{ *keptStream }

func (s transportStream) SetTrailer(md metadata.MD) error { s.keptStream.SetTrailer(md); return nil }

// rejecting are the three rejections of the wire table, each from a Guard
// that rejects every call: an open breaker, a spent rate limit (with a
// quota), a load guard shedding.
func rejecting(tb testing.TB, clk sluice.Clock) []struct {
	name string
	g    *sluice.Guard
} {
	br, err := breaker.New("breaker/bench", breaker.WithClock(clk))
	if err != nil {
		tb.Fatal(err)
	}
	br.OpenFor(context.Background(), clk.Now(), time.Hour)
	lim, err := ratelimit.NewFixedWindow(1, time.Hour, ratelimit.WithName("ratelimit/bench"))
	if err != nil {
		tb.Fatal(err)
	}
	spent := mustGuard(tb, sluice.WithClock(clk), sluice.With(lim))
	if err := spent.Do(context.Background(), func(context.Context) error { return nil }); err != nil {
		tb.Fatal(err)
	}
	shed := &refuser{name: "adaptive/bench", cause: sluice.ErrOverloaded, retry: 500 * time.Millisecond}
	return []struct {
		name string
		g    *sluice.Guard
	}{
		{"circuit-open", mustGuard(tb, sluice.WithClock(clk), sluice.With(br))},
		{"rate-limited", spent},
		{"overloaded", mustGuard(tb, sluice.WithClock(clk), sluice.With(shed))},
	}
}

// rejectPaths returns, for Guard g, one rejected call through each
// interceptor: unary server, stream server, unary client, stream client.
func rejectPaths(tb testing.TB, g *sluice.Guard) []struct {
	name string
	call func()
} {
	s := &keptStream{}
	s.ctx = grpc.NewContextWithServerTransportStream(context.Background(), transportStream{s})
	us := unary(tb, WithGuard(g))
	ss := stream(tb, WithGuard(g))
	uc, err := UnaryClientInterceptor(WithGuard(g))
	if err != nil {
		tb.Fatal(err)
	}
	sc, err := StreamClientInterceptor(WithGuard(g))
	if err != nil {
		tb.Fatal(err)
	}
	uinfo := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	sinfo := &grpc.StreamServerInfo{FullMethod: methodWatch, IsServerStream: true}
	desc := &grpc.StreamDesc{ServerStreams: true}
	ctx := context.Background()
	handler := func(context.Context, any) (any, error) { tb.Fatal("handler ran"); return nil, nil }
	shandler := func(any, grpc.ServerStream) error { tb.Fatal("handler ran"); return nil }
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		tb.Fatal("invoker ran")
		return nil
	}
	streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		tb.Fatal("streamer ran")
		return nil, nil
	}
	return []struct {
		name string
		call func()
	}{
		{"unary-server", func() { _, _ = us(s.ctx, nil, uinfo, handler) }},
		{"stream-server", func() { _ = ss(nil, s, sinfo, shandler) }},
		{"unary-client", func() { _ = uc(ctx, methodCheck, nil, nil, nil, invoker) }},
		{"stream-client", func() { _, _ = sc(ctx, desc, nil, methodWatch, streamer) }},
	}
}

// BenchmarkReject measures every rejection path on the system clock: a
// rejection's delay counts down, so the answer changes every millisecond.
func BenchmarkReject(b *testing.B) {
	for _, r := range rejecting(b, sluice.SystemClock) {
		for _, p := range rejectPaths(b, r.g) {
			b.Run(p.name+"/"+r.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					p.call()
				}
			})
		}
	}
}

// Every rejection path answers a flood of rejections without allocating:
// the answer is made once and shared while the delay it announces, to the
// millisecond, holds. A client call's context, which names its method as
// its resource, is lent for the call and given back when it is rejected.
func TestRejectionsAllocateNothing(t *testing.T) {
	clk := sluice.NewManualClock(time.Minute)
	for _, r := range rejecting(t, clk) {
		for _, p := range rejectPaths(t, r.g) {
			t.Run(p.name+"/"+r.name, func(t *testing.T) {
				assert.Zero(t, mallocs(1000, p.call))
			})
		}
	}
}

// mallocs returns how many allocations runs calls of f make in all, after
// one call to warm up: testing.AllocsPerRun's count, without its rounding
// down to whole allocations per run. The process's other goroutines (the
// test runner's) may allocate meanwhile: of three counts, the least.
func mallocs(runs int, f func()) uint64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	least := ^uint64(0)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			f()
		}
		runtime.ReadMemStats(&after)
		least = min(least, after.Mallocs-before.Mallocs)
	}
	return least
}

// A shared answer never outlives its delay: a rejection a millisecond
// later announces the delay of its own instant, on the wire and in its
// pushback, while two at the same instant share one error.
func TestSharedAnswersFollowTheDelay(t *testing.T) {
	clk := sluice.NewManualClock(time.Minute)
	r := rejecting(t, clk)[0] // the breaker, open for an hour
	s := &keptStream{}
	s.ctx = grpc.NewContextWithServerTransportStream(context.Background(), transportStream{s})
	i := unary(t, WithGuard(r.g))
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	reject := func() (push string, err error) {
		_, err = i(s.ctx, nil, info, func(context.Context, any) (any, error) { return nil, nil })
		return s.trailer.Get(MetadataRetryPushback)[0], err
	}
	push, first := reject()
	_, again := reject()
	assert.Same(t, first, again, "one instant, one answer")
	assert.Equal(t, "3600000", push)
	assert.Equal(t, time.Hour, readWire(t, first).delay)

	clk.Advance(1500 * time.Microsecond)
	push, later := reject()
	assert.NotSame(t, first, later)
	assert.Equal(t, "3599999", push, "the delay left, rounded up to the millisecond")
	assert.Equal(t, time.Hour-time.Millisecond, readWire(t, later).delay)
	assert.Equal(t, time.Hour, readWire(t, first).delay, "an answer given is never changed")
}
