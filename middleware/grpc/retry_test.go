package sluicegrpc

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// rejectFirst is a policy that rejects its first n requests with cause and
// delay retry, and admits every later one.
type rejectFirst struct {
	n     atomic.Int64
	cause error
	retry time.Duration
}

func (*rejectFirst) Name() string        { return "ratelimit/first" }
func (*rejectFirst) Needs() sluice.Needs { return 0 }
func (r *rejectFirst) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if r.n.Add(-1) >= 0 {
		return 0, sluice.Quota{Limit: 1, RetryAfter: r.retry, Reset: r.retry}, r.cause
	}
	return 0, sluice.Quota{Limit: 1, Remaining: 0}, nil
}
func (*rejectFirst) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

// rejectingOnce returns a rejectFirst that rejects its first request with
// cause and delay retry.
func rejectingOnce(cause error, retry time.Duration) *rejectFirst {
	p := &rejectFirst{cause: cause, retry: retry}
	p.n.Store(1)
	return p
}

// serverRejections are the causes of a sluice server's rejections that a
// client's retries must wait out: a quota's, an open breaker's, a shedder's.
var serverRejections = []struct {
	name  string
	cause error
}{{"rate limited", sluice.ErrRateLimited}, {"circuit open", sluice.ErrCircuitOpen}, {"overloaded", sluice.ErrOverloaded}}

// retryConfig is a service config whose retryPolicy retries Check on the
// codes of sluice's rejections, with a backoff far shorter than the
// rejections' delay: a retry that waits the delay waits the pushback.
const retryConfig = `{"methodConfig": [{
	"name": [{"service": "grpc.health.v1.Health", "method": "Check"}],
	"retryPolicy": {
		"maxAttempts": 3,
		"initialBackoff": "0.001s",
		"maxBackoff": "0.001s",
		"backoffMultiplier": 1,
		"retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]
	}
}]}`

// A rejection is trailers-only, with its delay as gRPC's retry pushback: a
// stock grpc-go client with a retryPolicy retries it, after the delay, and
// the retry succeeds.
func TestRejectionIsRetriedByARetryPolicyAfterThePushback(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		for _, c := range serverRejections {
			t.Run(c.name, func(t *testing.T) {
				const delay = 150 * time.Millisecond
				p := rejectingOnce(c.cause, delay)
				g := mustGuard(t, sluice.With(p))
				s := start(t, tr, serverOpts(t, WithGuard(g), WithQuotaMetadata()),
					grpc.WithDefaultServiceConfig(retryConfig))
				var tlr metadata.MD
				began := time.Now()
				err := s.check(withTimeout(t), grpc.Trailer(&tlr))
				took := time.Since(began)
				require.NoError(t, err, "the rejection was not retried")
				assert.Equal(t, int64(1), s.health.calls.Load(), "the handler's calls")
				assert.Equal(t, int64(-1), p.n.Load(), "the policy was asked twice")
				assert.GreaterOrEqual(t, took, delay, "the retry did not wait for the pushback")
			})
		}
	})
}

// A pushback longer than what is left of the call's deadline is never
// retried by a stock client: the call fails without a second attempt.
func TestRejectionPushbackPastTheDeadlineIsNotRetried(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		for _, c := range serverRejections {
			t.Run(c.name, func(t *testing.T) {
				p := rejectingOnce(c.cause, time.Minute)
				s := start(t, tr, serverOpts(t, WithGuard(mustGuard(t, sluice.With(p)))),
					grpc.WithDefaultServiceConfig(retryConfig))
				// A real wait, bounded: the loopback server runs on the wall
				// clock, and grpc-go waits the pushback out to the deadline.
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				err := s.check(ctx)
				require.Error(t, err)
				assert.Equal(t, int64(0), p.n.Load(), "the policy was asked again: the call was retried")
				assert.Zero(t, s.health.calls.Load(), "the handler ran")
			})
		}
	})
}

// Without the pushback, a stock client's retryPolicy retries a rejection
// with its own backoff (a millisecond here), not after the rejection's
// delay of a minute; the RetryInfo still announces the delay.
func TestWithoutRetryPushback(t *testing.T) {
	const delay = time.Minute
	p := &rejectFirst{cause: sluice.ErrCircuitOpen, retry: delay}
	p.n.Store(1)
	s := start(t, transports[0], serverOpts(t, WithGuard(mustGuard(t, sluice.With(p))), WithoutRetryPushback()),
		grpc.WithDefaultServiceConfig(retryConfig))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.check(ctx), "retried at once, before the delay")
	assert.Equal(t, int64(-1), p.n.Load(), "the policy was asked twice")

	ks := &keptStream{}
	ks.ctx = grpc.NewContextWithServerTransportStream(context.Background(), transportStream{ks})
	for _, opts := range [][]Option{nil, {WithoutRetryPushback()}} {
		p.n.Store(1)
		i := unary(t, append(opts, WithGuard(mustGuard(t, sluice.With(p))))...)
		_, err := i(ks.ctx, nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, func(context.Context, any) (any, error) { return nil, nil })
		assert.Equal(t, delay, readWire(t, err).delay, "the RetryInfo stays")
		_, _, ok := quota(t, ks.trailer)
		assert.True(t, ok, "the quota stays")
		if opts == nil {
			assert.Equal(t, []string{"60000"}, ks.trailer.Get(MetadataRetryPushback))
		} else {
			assert.Empty(t, ks.trailer.Get(MetadataRetryPushback))
		}
	}
	_, err := UnaryClientInterceptor(WithGuard(mustGuard(t)), WithoutRetryPushback())
	assert.Error(t, err, "for servers only")
	_, err = UnaryServerInterceptor(WithGuard(mustGuard(t)), WithoutRetryPushback(), WithoutRetryPushback())
	assert.Error(t, err, "given twice")
}

// A server interceptor runs a handler once: a Guard that declares retries
// is refused there, and taken by a client interceptor, which makes them.
func TestServerInterceptorsRefuseAGuardThatRetries(t *testing.T) {
	retrying := mustGuard(t, sluice.WithRetry(sluice.Retry{}))
	_, err := UnaryServerInterceptor(WithGuard(retrying))
	assert.ErrorContains(t, err, "declares retries")
	_, err = StreamServerInterceptor(WithGuard(retrying))
	assert.ErrorContains(t, err, "declares retries")
	_, err = UnaryServerInterceptor(WithGuard(mustGuard(t)), WithMessageGuard(retrying))
	assert.ErrorContains(t, err, "declares retries")
	_, err = UnaryClientInterceptor(WithGuard(retrying))
	assert.NoError(t, err)
}
