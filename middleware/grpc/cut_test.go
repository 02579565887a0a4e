package sluicegrpc

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policytest"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A call that a deadline ended, the Guard's or the caller's, is a bound
// for a Shedder. A gRPC server's caller sets its deadline (grpc-timeout):
// a handler that runs into it fails with DeadlineExceeded, which the
// interceptor reports without an error; the Guard tells it by the call's
// context, on the server and on the client.
func TestCallersDeadlineIsACutShort(t *testing.T) {
	cuts := policytest.RecordCuts(t)
	synctest.Test(t, func(t *testing.T) {
		c := testpolicy.NewCounter()
		g := mustGuard(t, sluice.With(c)) // no Guard timeout: the caller's deadline only
		server, err := UnaryServerInterceptor(WithGuard(g))
		if err != nil {
			t.Fatal(err)
		}
		handler := func(ctx context.Context, _ any) (any, error) {
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		_, err = server(ctx, nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, handler)
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("err = %v", err)
		}
		client, err := UnaryClientInterceptor(WithGuard(g))
		if err != nil {
			t.Fatal(err)
		}
		invoke := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel2()
		_ = client(ctx2, methodCheck, nil, nil, nil, invoke)
		if got := cuts(); len(got) != 2 {
			t.Fatalf("calls the caller's deadline ended told as cut short: %v, want 2 (server and client)", got)
		}
	})
}
