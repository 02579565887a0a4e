// Command grpc guards a gRPC server and its client with sluice, using the
// standard health service (grpc.health.v1.Health: unary Check, streaming
// Watch), so it needs no generated code of its own.
//
// The server's interceptors limit Check to a token bucket and shed calls and
// streams over a bulkhead of 2 in flight. The
// client's interceptors keep a circuit breaker for the server's target and
// give each unary call 100 ms; they honour the RetryInfo a rejection carries,
// so the client stops calling for as long as the server asked.
//
// Run the scripted demonstration:
//
//	go run ./examples/grpc
//
// Or keep the server up and call it by hand (reflection is on):
//
//	go run ./examples/grpc -serve -addr 127.0.0.1:50051
//	grpcurl -plaintext 127.0.0.1:50051 grpc.health.v1.Health/Check
//	grpcurl -plaintext 127.0.0.1:50051 grpc.health.v1.Health/Watch
//
// The server and the client are in main.go; demo.go plays the
// demonstration with them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	sluicegrpc "github.com/sluice-go/sluice/middleware/grpc"
	"github.com/sluice-go/sluice/ratelimit"
)

const (
	// callTimeout bounds each unary call of the client.
	callTimeout = 100 * time.Millisecond
	// openFor is how long the client's breaker stays open after it trips:
	// short, so the demonstration sees it recover.
	openFor = 200 * time.Millisecond
)

func main() {
	serve := flag.Bool("serve", false, "keep serving on -addr until Ctrl-C instead of running the demonstration")
	addr := flag.String("addr", "127.0.0.1:50051", "listen address with -serve")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *serve {
		err = serveUntil(ctx, *addr, os.Stdout)
	} else {
		err = run(ctx, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpc:", err)
		os.Exit(1)
	}
}

// server is the gRPC server with its guards.
type server struct {
	grpc   *grpc.Server
	health *health.Server
	guards []*sluice.Guard
	slow   atomic.Bool  // set to play a dependency of Check turning slow
	calls  atomic.Int64 // Check calls that reached the server
}

func newServer() (*server, error) {
	s := &server{health: health.NewServer()}
	// A bulkhead of 2 in flight makes shedding visible in a demonstration
	// (a service would use adaptive.NewShedder, which learns its limit).
	// Check and Watch share it: a stream in flight counts as much as a call.
	load, err := adaptive.NewBulkhead(2, adaptive.WithName("bulkhead/server"))
	if err != nil {
		return nil, err
	}
	// Check (standing for any method of a real service) may be called 10
	// times a second, in bursts of 3.
	limit, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 3, ratelimit.WithName("ratelimit/check"))
	if err != nil {
		return nil, err
	}
	check, err := sluice.New(sluice.With(limit, load))
	if err != nil {
		return nil, err
	}
	watch, err := sluice.New(sluice.With(load))
	if err != nil {
		return nil, err
	}
	s.guards = []*sluice.Guard{check, watch}

	opts := []sluicegrpc.Option{
		sluicegrpc.WithMethodGuard(healthpb.Health_Check_FullMethodName, check),
		sluicegrpc.WithMethodGuard(healthpb.Health_Watch_FullMethodName, watch),
	}
	unary, err := sluicegrpc.UnaryServerInterceptor(opts...)
	if err != nil {
		return nil, err
	}
	stream, err := sluicegrpc.StreamServerInterceptor(opts...)
	if err != nil {
		return nil, err
	}
	s.grpc = grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.count, unary, s.latency),
		grpc.ChainStreamInterceptor(stream),
	)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	return s, nil
}

// count counts the calls that reach the server, to show that the client's
// open breaker spares it.
func (s *server) count(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	s.calls.Add(1)
	return next(ctx, req)
}

// latency stands for a dependency of the handler turning slow: while s.slow
// is set, each call takes 300 ms, or until its caller gives up.
func (s *server) latency(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if s.slow.Load() {
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return next(ctx, req)
}

func (s *server) close() {
	for _, g := range s.guards {
		g.Close()
	}
}

func serveUntil(ctx context.Context, addr string, out io.Writer) error {
	s, err := newServer()
	if err != nil {
		return err
	}
	defer s.close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(ln) }()
	fmt.Fprintf(out, "serving grpc.health.v1.Health on %s (Ctrl-C to stop)\n", ln.Addr())
	select {
	case err = <-errc:
		return err
	case <-ctx.Done():
	}
	s.health.Shutdown() // watchers hear NOT_SERVING before the server goes
	// Calls in flight may finish, for a while: a Watch never ends by itself.
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		s.grpc.Stop()
		<-stopped
	}
	return served(<-errc)
}

// served filters out of Serve's error the one that says the server was
// stopped before it began serving.
func served(err error) error {
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// newClient connects to target with the client interceptors: a breaker for
// the target, a timeout per unary call.
func newClient(target string, logf func(format string, args ...any)) (*grpc.ClientConn, *sluice.Guard, error) {
	b, err := breaker.New("backend", breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(openFor))
	if err != nil {
		return nil, nil, err
	}
	b.Subscribe(func(c sluice.StateChange) {
		logf("    [client %s: %s -> %s]\n", c.Policy, c.From, c.To)
	})
	g, err := sluice.New(sluice.With(b))
	if err != nil {
		return nil, nil, err
	}
	// One guard per target: a client of several services keeps a breaker
	// for each, so one failing backend does not stop calls to the others.
	opts := []sluicegrpc.Option{sluicegrpc.WithTargetGuard(target, g), sluicegrpc.WithTimeout(callTimeout)}
	unary, err := sluicegrpc.UnaryClientInterceptor(opts...)
	if err != nil {
		return nil, nil, err
	}
	stream, err := sluicegrpc.StreamClientInterceptor(opts...)
	if err != nil {
		return nil, nil, err
	}
	cc, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(unary),
		grpc.WithStreamInterceptor(stream))
	if err != nil {
		g.Close()
		return nil, nil, err
	}
	return cc, g, nil
}

// describe prints what a client can read from a gRPC error: its code, and
// the RetryInfo and ErrorInfo details of a sluice rejection.
func describe(err error) string {
	st := status.Convert(err)
	s := st.Code().String()
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			s += "  RetryInfo: " + d.GetRetryDelay().AsDuration().Round(time.Millisecond).String()
		case *errdetails.ErrorInfo:
			s += "  ErrorInfo: " + d.GetReason() + " by " + d.GetMetadata()["policy"]
		}
	}
	return s
}
