package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	sluicegrpc "github.com/sluice-go/sluice/middleware/grpc"
)

// run starts the server on a free loopback port and plays the demonstration
// with a guarded client.
func run(ctx context.Context, out io.Writer) (err error) {
	s, err := newServer()
	if err != nil {
		return err
	}
	defer s.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(ln) }()
	defer func() {
		s.grpc.Stop() // ends the streams still open, if the demonstration failed
		err = errors.Join(err, served(<-errc))
	}()

	cc, g, err := newClient(ln.Addr().String(), func(format string, args ...any) { fmt.Fprintf(out, format, args...) })
	if err != nil {
		return err
	}
	defer g.Close()
	defer cc.Close()
	return demo(ctx, out, s, healthpb.NewHealthClient(cc))
}

func demo(ctx context.Context, out io.Writer, s *server, hc healthpb.HealthClient) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	check := func() {
		var trailer metadata.MD // a rate limit's rejection carries the quota here
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
		if err == nil {
			say("Check -> OK %v   (server saw %d calls)", resp.GetStatus(), s.calls.Load())
			return
		}
		say("Check -> %s   (server saw %d calls)", describe(err), s.calls.Load())
		if rl := trailer.Get(sluicegrpc.MetadataRateLimit); len(rl) > 0 {
			say("         %s: %s", sluicegrpc.MetadataRateLimit, rl[0])
		}
	}
	wait := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	say("1. the server limits Check to bursts of 3; the 4th call is told when to retry,")
	say("   and the client's breaker holds back the next one for that long without sending it")
	for range 5 {
		check()
	}
	// Past the RetryInfo, and long enough for the bucket to hold two tokens
	// again for what follows.
	if err := wait(200 * time.Millisecond); err != nil {
		return err
	}
	check()

	say("\n2. Check turns slow: the client gives up after %v; two timeouts open its breaker", callTimeout)
	s.slow.Store(true)
	for range 3 {
		check()
	}
	s.slow.Store(false)
	say("   ...Check heals; after %v the breaker lets a probe through", openFor)
	if err := wait(openFor + 50*time.Millisecond); err != nil {
		return err
	}
	check()

	say("\n3. Watch streams the server's status; two streams fill the server's bulkhead of 2")
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first, err := hc.Watch(sctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if err := recvStatus(out, "#1", first); err != nil {
		return err
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := recvStatus(out, "#1", first); err != nil {
		return err
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	if err := recvStatus(out, "#1", first); err != nil {
		return err
	}
	second, err := hc.Watch(sctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if err := recvStatus(out, "#2", second); err != nil {
		return err
	}
	// A stream is admitted when it opens, so the third one learns of the
	// load at its first receive.
	third, err := hc.Watch(sctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		say("Watch#3 -> %s", describe(err))
	} else if _, err := third.Recv(); err != nil {
		say("Watch#3 -> %s", describe(err))
	}
	cancel() // the streams end; the server's load falls back
	return nil
}

// recvStatus receives one status from a Watch stream and prints it.
func recvStatus(out io.Writer, name string, stream grpc.ServerStreamingClient[healthpb.HealthCheckResponse]) error {
	resp, err := stream.Recv()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Watch%s <- %v\n", name, resp.GetStatus())
	return nil
}
