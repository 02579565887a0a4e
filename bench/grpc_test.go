package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	sentinel "github.com/alibaba/sentinel-golang/api"
	"github.com/alibaba/sentinel-golang/core/base"
	"github.com/alibaba/sentinel-golang/core/flow"
	"github.com/failsafe-go/failsafe-go"
	fscb "github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	fsrate "github.com/failsafe-go/failsafe-go/ratelimiter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	sluicegrpc "github.com/sluice-go/sluice/middleware/grpc"
	"github.com/sluice-go/sluice/ratelimit"
)

// The gRPC benchmarks call each library's unary interceptor directly, with
// no network, around a handler that does nothing: what the interceptor adds
// to a call. Every guard holds a rate limiter far above what a benchmark
// reaches and a closed circuit breaker, so every call is admitted and its
// success reported. sentinel-golang v1.0.4 ships no gRPC adapter (it lives in
// a module of its own), so its row is sentinel.Entry inside an interceptor
// written here, the way its adapter does it.
const grpcMethod = "/bench.Service/Call"

var (
	grpcInfo  = &grpc.UnaryServerInfo{FullMethod: grpcMethod}
	grpcReply = new(int)
)

func grpcHandler(context.Context, any) (any, error) { return grpcReply, nil }

func grpcInvoker(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	return nil
}

// grpcSluiceGuard is a token bucket and a breaker in one Guard.
func grpcSluiceGuard(tb testing.TB) *sluice.Guard {
	tb.Helper()
	tbk, err := ratelimit.NewTokenBucket(ratelimit.Rate{Count: 1_000_000_000, Period: time.Second}, 1_000_000_000)
	if err != nil {
		tb.Fatal(err)
	}
	br, err := breaker.New("bench")
	if err != nil {
		tb.Fatal(err)
	}
	g, err := sluice.New(sluice.With(tbk, br))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = g.Close() })
	return g
}

func grpcFailsafePolicies() []failsafe.Policy[any] {
	return []failsafe.Policy[any]{
		fsrate.NewBursty[any](1_000_000_000, time.Second),
		fscb.NewWithDefaults[any](),
	}
}

// grpcSentinel starts sentinel (sharing the limiter benchmarks' start) and
// loads a flow rule and an error-count breaker rule on the method.
func grpcSentinel(b *testing.B) {
	sentinelFlow(b)
	if _, err := flow.LoadRulesOfResource(grpcMethod, []*flow.Rule{{
		Resource:               grpcMethod,
		TokenCalculateStrategy: flow.Direct,
		ControlBehavior:        flow.Reject,
		Threshold:              1_000_000_000,
		StatIntervalInMs:       1000,
	}}); err != nil {
		b.Fatal(err)
	}
	sentinelBreaker(b, grpcMethod, 1e9)
}

// sentinelUnaryServer is sentinel's server interceptor: one entry per call
// on the full method, the handler's error traced for the breaker.
func sentinelUnaryServer(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	e, blocked := sentinel.Entry(info.FullMethod, sentinel.WithResourceType(base.ResTypeRPC), sentinel.WithTrafficType(base.Inbound))
	if blocked != nil {
		return nil, status.Error(codes.ResourceExhausted, "blocked")
	}
	defer e.Exit()
	resp, err := handler(ctx, req)
	if err != nil {
		sentinel.TraceError(e, err)
	}
	return resp, err
}

func mustUnaryServer(tb testing.TB, opts ...sluicegrpc.Option) grpc.UnaryServerInterceptor {
	tb.Helper()
	i, err := sluicegrpc.UnaryServerInterceptor(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return i
}

// BenchmarkGRPCUnaryServer compares one admitted unary call through each
// library's server interceptor; "bare" is the handler alone.
func BenchmarkGRPCUnaryServer(b *testing.B) {
	ctx := context.Background()
	run(b, "bare", func() { _, _ = grpcHandler(ctx, nil) })

	sl := mustUnaryServer(b, sluicegrpc.WithGuard(grpcSluiceGuard(b)))
	run(b, "sluice", func() { _, _ = sl(ctx, nil, grpcInfo, grpcHandler) })

	// The same Guard on its method in a table of two.
	slm := mustUnaryServer(b, sluicegrpc.WithMethodGuard(grpcMethod, grpcSluiceGuard(b)),
		sluicegrpc.WithMethodGuard("/bench.Service/Other", grpcSluiceGuard(b)))
	run(b, "sluice-method-table", func() { _, _ = slm(ctx, nil, grpcInfo, grpcHandler) })

	fs := failsafegrpc.NewUnaryServerInterceptor[any](grpcFailsafePolicies()...)
	run(b, "failsafegrpc", func() { _, _ = fs(ctx, nil, grpcInfo, grpcHandler) })

	grpcSentinel(b)
	run(b, "sentinel", func() { _, _ = sentinelUnaryServer(ctx, nil, grpcInfo, grpcHandler) })
}

// BenchmarkGRPCUnaryClient compares one admitted outgoing unary call through
// each library's client interceptor; "bare" is the invoker alone.
func BenchmarkGRPCUnaryClient(b *testing.B) {
	ctx := context.Background()
	run(b, "bare", func() { _ = grpcInvoker(ctx, grpcMethod, nil, nil, nil) })

	sl, err := sluicegrpc.UnaryClientInterceptor(sluicegrpc.WithGuard(grpcSluiceGuard(b)))
	if err != nil {
		b.Fatal(err)
	}
	run(b, "sluice", func() { _ = sl(ctx, grpcMethod, nil, nil, nil, grpcInvoker) })

	fs := failsafegrpc.NewUnaryClientInterceptor[any](grpcFailsafePolicies()...)
	run(b, "failsafegrpc", func() { _ = fs(ctx, grpcMethod, nil, nil, nil, grpcInvoker) })
}

// BenchmarkGRPCRejected compares a call rejected by an open breaker: the
// rejection and the status it becomes. sluice's status carries RetryInfo
// and ErrorInfo details.
func BenchmarkGRPCRejected(b *testing.B) {
	ctx := context.Background()
	br, err := breaker.New("bench-open")
	if err != nil {
		b.Fatal(err)
	}
	br.ForceOpen()
	g, err := sluice.New(sluice.With(br))
	if err != nil {
		b.Fatal(err)
	}
	sl := mustUnaryServer(b, sluicegrpc.WithGuard(g))
	run(b, "sluice", func() {
		if _, err := sl(ctx, nil, grpcInfo, grpcHandler); status.Code(err) != codes.Unavailable {
			b.Fatal(err)
		}
	})

	cb := fscb.NewWithDefaults[any]()
	cb.Open()
	fs := failsafegrpc.NewUnaryServerInterceptor[any](cb)
	run(b, "failsafegrpc", func() {
		if _, err := fs(ctx, nil, grpcInfo, grpcHandler); err == nil {
			b.Fatal("admitted")
		}
	})
}

// TestGRPCBenchRuns keeps the benchmarks' set-up honest in `go test`: every
// interceptor admits the call and returns the handler's reply, and an open
// sluice breaker answers with its status.
func TestGRPCBenchRuns(t *testing.T) {
	ctx := context.Background()
	sl := mustUnaryServer(t, sluicegrpc.WithGuard(grpcSluiceGuard(t)))
	fs := failsafegrpc.NewUnaryServerInterceptor[any](grpcFailsafePolicies()...)
	for name, i := range map[string]grpc.UnaryServerInterceptor{"sluice": sl, "failsafegrpc": fs} {
		resp, err := i(ctx, nil, grpcInfo, grpcHandler)
		if err != nil || resp != grpcReply {
			t.Fatalf("%s: %v, %v", name, resp, err)
		}
	}
	c, err := sluicegrpc.UnaryClientInterceptor(sluicegrpc.WithGuard(grpcSluiceGuard(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c(ctx, grpcMethod, nil, nil, nil, grpcInvoker); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = sl(ctx, nil, grpcInfo, grpcHandler) }); n != 0 {
		t.Errorf("sluice interceptor: %v allocs per admitted call", n)
	}
	failing := func(context.Context, any) (any, error) { return nil, errors.New("down") }
	br, err := breaker.New("bench-trip", breaker.WithConsecutiveFailures(1))
	if err != nil {
		t.Fatal(err)
	}
	g, err := sluice.New(sluice.With(br))
	if err != nil {
		t.Fatal(err)
	}
	tr := mustUnaryServer(t, sluicegrpc.WithGuard(g))
	_, _ = tr(ctx, nil, grpcInfo, failing)
	if _, err := tr(ctx, nil, grpcInfo, grpcHandler); status.Code(err) != codes.Unavailable {
		t.Fatalf("open breaker: %v", err)
	}
}
