package sluicegrpc

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// deadlineIgnored is a classifier that counts a DeadlineExceeded for
// nothing (a caller's short deadline is not the dependency's fault), and
// every other code as Classify does.
func deadlineIgnored(err error) sluice.Outcome {
	if status.Code(err) == codes.DeadlineExceeded {
		return sluice.Ignored
	}
	return Classify(err)
}

// Past the client Guard's deadline, an Unavailable (a failure by the
// classifier) is the timeout: it goes back as DeadlineExceeded, however
// the classifier counts a DeadlineExceeded (the outcome invoke reports).
func TestClientFailurePastTheDeadlineIsTheTimeoutWhateverItCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testpolicy.NewCounter()
		g := mustGuard(t, sluice.With(c), sluice.WithTimeout(100*time.Millisecond))
		client, err := UnaryClientInterceptor(WithGuard(g), WithClassifier(deadlineIgnored))
		require.NoError(t, err)
		invoke := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			<-ctx.Done()
			return status.Error(codes.Unavailable, "connection reset")
		}
		err = client(context.Background(), methodCheck, nil, nil, nil, invoke)
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "a failure past the Guard's deadline went back as itself: %v", err)
	})
}

// The same on a server: a handler's Unavailable past the Guard's deadline
// is answered as the timeout (DeadlineExceeded), as endServed's comment
// says, whatever the classifier makes of a DeadlineExceeded.
func TestServerFailurePastTheDeadlineIsTheTimeoutWhateverItCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testpolicy.NewCounter()
		g := mustGuard(t, sluice.With(c), sluice.WithTimeout(100*time.Millisecond))
		server, err := UnaryServerInterceptor(WithGuard(g), WithClassifier(deadlineIgnored))
		require.NoError(t, err)
		handler := func(ctx context.Context, _ any) (any, error) {
			<-ctx.Done()
			return nil, status.Error(codes.Unavailable, "pool closed")
		}
		_, err = server(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, handler)
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "a failure past the Guard's deadline was answered as itself: %v", err)
	})
}
