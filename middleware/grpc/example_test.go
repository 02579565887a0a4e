package sluicegrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/middleware"
	sluicegrpc "github.com/sluice-go/sluice/middleware/grpc"
	"github.com/sluice-go/sluice/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func check(err error) {
	if err != nil {
		panic(err)
	}
}

// describe prints a call's result as a client sees it.
func describe(err error) {
	if err == nil {
		fmt.Println("OK")
		return
	}
	if d, ok := sluicegrpc.RejectionOf(err); ok {
		fmt.Printf("%v %s by %s, retry in %v\n", status.Code(err), sluice.CauseOf(d.Cause), d.Policy, d.RetryAfter)
		return
	}
	fmt.Println(status.Code(err))
}

// A server limits a method to two calls a minute; the third is answered with
// ResourceExhausted and a RetryInfo until the window ends.
func ExampleUnaryServerInterceptor() {
	clock := sluice.NewManualClock(0)
	limit, err := ratelimit.NewFixedWindow(2, time.Minute, ratelimit.WithName("ratelimit/check"))
	check(err)
	guard, err := sluice.New(sluice.With(limit), sluice.WithClock(clock))
	check(err)
	defer guard.Close()

	intercept, err := sluicegrpc.UnaryServerInterceptor(
		sluicegrpc.WithMethodGuard(healthpb.Health_Check_FullMethodName, guard))
	check(err)
	// Installed with grpc.NewServer(grpc.UnaryInterceptor(intercept)); here
	// it is called as gRPC would call it.
	info := &grpc.UnaryServerInfo{FullMethod: healthpb.Health_Check_FullMethodName}
	handler := func(context.Context, any) (any, error) { return &healthpb.HealthCheckResponse{}, nil }
	for range 3 {
		clock.Advance(10 * time.Second)
		_, err := intercept(context.Background(), &healthpb.HealthCheckRequest{}, info, handler)
		describe(err)
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted rate-limited by ratelimit/check, retry in 30s
}

// A client's breaker opens after two failing calls to a dependency; the next
// call fails at once, without reaching the server.
func ExampleUnaryClientInterceptor() {
	clock := sluice.NewManualClock(0)
	b, err := breaker.New("payments", breaker.WithConsecutiveFailures(2),
		breaker.WithOpenDuration(15*time.Second), breaker.WithClock(clock))
	check(err)
	guard, err := sluice.New(sluice.With(b), sluice.WithClock(clock))
	check(err)
	defer guard.Close()

	intercept, err := sluicegrpc.UnaryClientInterceptor(sluicegrpc.WithGuard(guard),
		sluicegrpc.WithTimeout(2*time.Second))
	check(err)
	// Installed with grpc.NewClient(target, grpc.WithUnaryInterceptor(intercept));
	// here a stand-in for the server fails with Unavailable.
	calls := 0
	server := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		calls++
		return status.Error(codes.Unavailable, "payments is down")
	}
	for range 3 {
		describe(intercept(context.Background(), "/pay.Payments/Charge", nil, nil, nil, server))
	}
	fmt.Println("server calls:", calls)
	// Output:
	// Unavailable
	// Unavailable
	// Unavailable circuit-open by breaker/payments, retry in 15s
	// server calls: 2
}

// A ServerInHandle turns calls away by client address before gRPC reads
// them; x-forwarded-for is believed only from the trusted proxy.
func ExampleServerInHandle() {
	clock := sluice.NewManualClock(0)
	perClient, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewFixedWindow(1, time.Second)
	}, ratelimit.WithName("ratelimit/per-client"))
	check(err)
	guard, err := sluice.New(sluice.With(perClient), sluice.WithClock(clock))
	check(err)
	defer guard.Close()
	ips, err := middleware.NewIPExtractor(middleware.TrustedProxies("10.0.0.0/8"))
	check(err)

	keyer, err := middleware.NewKeyer(middleware.SharedKey("unknown"), middleware.KeyByIP(ips))
	check(err)
	handle, err := sluicegrpc.ServerInHandle(sluicegrpc.WithGuard(guard), sluicegrpc.WithKeyer(keyer))
	check(err)
	// Installed with grpc.NewServer(grpc.InTapHandle(handle)).
	call := func(from, forwardedFor string) {
		ctx, cancel := context.WithCancel(peer.NewContext(context.Background(),
			&peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(from), Port: 4000}}))
		defer cancel() // the call ends
		info := &tap.Info{FullMethodName: "/shop.Shop/Buy", Header: map[string][]string{}}
		if forwardedFor != "" {
			info.Header["x-forwarded-for"] = []string{forwardedFor}
		}
		_, err := handle(ctx, info)
		describe(err)
	}
	call("203.0.113.5", "")
	call("203.0.113.5", "198.51.100.1") // spoofed: not from a trusted proxy
	call("10.0.0.2", "198.51.100.1")    // through the proxy
	// Output:
	// OK
	// ResourceExhausted rate-limited by ratelimit/per-client, retry in 1s
	// OK
}

// chat echoes every message of a bidirectional stream.
func chat(_ any, ss grpc.ServerStream) error {
	for {
		var m wrapperspb.StringValue
		if err := ss.RecvMsg(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if err := ss.SendMsg(&m); err != nil {
			return err
		}
	}
}

// A server admits each stream and limits the messages it receives: the
// third message ends the stream with ResourceExhausted.
func ExampleStreamServerInterceptor() {
	clock := sluice.NewManualClock(0)
	msgs, err := ratelimit.NewFixedWindow(2, 10*time.Second, ratelimit.WithName("ratelimit/messages"))
	check(err)
	perMessage, err := sluice.New(sluice.With(msgs), sluice.WithClock(clock))
	check(err)
	defer perMessage.Close()
	streams, err := sluice.New()
	check(err)

	intercept, err := sluicegrpc.StreamServerInterceptor(sluicegrpc.WithGuard(streams),
		sluicegrpc.WithMessageGuard(perMessage))
	check(err)
	srv := grpc.NewServer(grpc.StreamInterceptor(intercept))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "example.Chat", HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Chat", Handler: chat, ServerStreams: true, ClientStreams: true}},
	}, struct{}{})
	l := bufconn.Listen(1 << 16)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(l) }()
	defer func() { srv.Stop(); <-served }()

	cc, err := grpc.NewClient("passthrough:///chat",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	check(err)
	defer cc.Close()
	st, err := cc.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/example.Chat/Chat")
	check(err)
	for _, text := range []string{"one", "two", "three"} {
		if err := st.SendMsg(wrapperspb.String(text)); err != nil {
			break
		}
		var echo wrapperspb.StringValue
		if err := st.RecvMsg(&echo); err != nil {
			describe(err)
			break
		}
		fmt.Println("echo:", echo.GetValue())
	}
	// Output:
	// echo: one
	// echo: two
	// ResourceExhausted rate-limited by ratelimit/messages, retry in 10s
}

// A client limits how many streams it opens to a dependency: the second
// stream in a second is refused without a call to the server.
func ExampleStreamClientInterceptor() {
	clock := sluice.NewManualClock(0)
	opens, err := ratelimit.NewFixedWindow(1, time.Second, ratelimit.WithName("ratelimit/streams"))
	check(err)
	guard, err := sluice.New(sluice.With(opens), sluice.WithClock(clock))
	check(err)
	defer guard.Close()

	intercept, err := sluicegrpc.StreamClientInterceptor(sluicegrpc.WithGuard(guard))
	check(err)
	// Installed with grpc.NewClient(target, grpc.WithStreamInterceptor(intercept));
	// here a stand-in opens streams that end at once.
	opened := 0
	streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		opened++
		return endedStream{}, nil
	}
	desc := &grpc.StreamDesc{ServerStreams: true}
	for range 2 {
		st, err := intercept(context.Background(), desc, nil, "/feed.Feed/Follow", streamer)
		describe(err)
		if err == nil {
			fmt.Println("recv:", st.RecvMsg(nil))
		}
	}
	fmt.Println("streams opened:", opened)
	// Output:
	// OK
	// recv: EOF
	// ResourceExhausted rate-limited by ratelimit/streams, retry in 1s
	// streams opened: 1
}

// endedStream is a client stream the server has already closed.
type endedStream struct{ grpc.ClientStream }

func (endedStream) RecvMsg(any) error { return io.EOF }
