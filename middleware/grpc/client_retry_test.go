package sluicegrpc

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/retrytest"
	"github.com/sluice-go/sluice/ratelimit"
)

// fakeServer is a fake invoker: it answers each call with answer, with its
// trailer set as a server's would be, and notes when each call came.
type fakeServer struct {
	answer func(n int) (metadata.MD, error)
	mu     sync.Mutex
	at     []time.Time
}

func (s *fakeServer) invoke(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	n := len(s.at)
	s.mu.Unlock()
	md, err := s.answer(n)
	for _, o := range opts {
		if tr, ok := o.(grpc.TrailerCallOption); ok {
			*tr.TrailerAddr = md
		}
	}
	return err
}

func (s *fakeServer) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at)
}

func unavailable(int) (metadata.MD, error) { return nil, status.Error(codes.Unavailable, "down") }

func unavailableUntil(k int) func(int) (metadata.MD, error) {
	return func(n int) (metadata.MD, error) {
		if n < k {
			return nil, status.Error(codes.Unavailable, "down")
		}
		return nil, nil
	}
}

// retrying returns a unary client interceptor whose Guard retries as r
// says, with opts, on a clock of the bubble, and the Guard.
func retrying(t *testing.T, r sluice.Retry, opts ...sluice.Option) (grpc.UnaryClientInterceptor, *sluice.Guard) {
	t.Helper()
	g, err := sluice.New(append([]sluice.Option{sluice.WithRetry(r)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	in, err := UnaryClientInterceptor(WithGuard(g))
	require.NoError(t, err)
	return in, g
}

func callThrough(in grpc.UnaryClientInterceptor, ctx context.Context, s *fakeServer) error {
	return in(ctx, "/pkg.Svc/Get", nil, nil, nil, s.invoke)
}

var generousRetry = sluice.Retry{Attempts: 3, Backoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second, Budget: 1, MinPerSecond: 100}

func TestClientRetriesWithinItsBackoffBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in, g := retrying(t, generousRetry)
		var gaps [2][]time.Duration
		for range 100 {
			s := &fakeServer{answer: unavailableUntil(3)}
			require.NoError(t, callThrough(in, context.Background(), s))
			require.Len(t, s.at, 3)
			gaps[0] = append(gaps[0], s.at[1].Sub(s.at[0]))
			gaps[1] = append(gaps[1], s.at[2].Sub(s.at[1]))
		}
		retrytest.Spread(t, gaps[:], []time.Duration{100 * time.Millisecond, 200 * time.Millisecond})
		assert.Equal(t, uint64(200), g.Stats().Retries)
	})
}

// Unavailable is retried; ResourceExhausted only when the server asked
// for a delay (a pushback, a RetryInfo): gRPC fails with it on the client
// too, for its message size limits, and would fail again.
func TestClientRetriesOnlyUnavailableAndResourceExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in, _ := retrying(t, generousRetry)
		for code, tries := range map[codes.Code]int{
			codes.Unavailable:       3,
			codes.ResourceExhausted: 1,
			codes.Internal:          1,
			codes.DeadlineExceeded:  1,
			codes.Unknown:           1,
			codes.InvalidArgument:   1,
		} {
			s := &fakeServer{answer: func(int) (metadata.MD, error) { return nil, status.Error(code, "no") }}
			err := callThrough(in, context.Background(), s)
			assert.Equal(t, code, status.Code(err))
			assert.Equal(t, tries, s.calls(), "%v", code)
		}
		s := &fakeServer{answer: func(int) (metadata.MD, error) {
			return metadata.Pairs(MetadataRetryPushback, "0"), status.Error(codes.ResourceExhausted, "quota")
		}}
		_ = callThrough(in, context.Background(), s)
		assert.Equal(t, 3, s.calls(), "ResourceExhausted with a pushback")
	})
}

func TestClientRetryStopsAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in, _ := retrying(t, sluice.Retry{Attempts: 50, Backoff: 20 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Budget: 1, MinPerSecond: 1000})
		s := &fakeServer{answer: func(int) (metadata.MD, error) {
			time.Sleep(30 * time.Millisecond)
			return nil, status.Error(codes.Unavailable, "down")
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		dl, _ := ctx.Deadline()
		err := callThrough(in, ctx, s)
		assert.Equal(t, codes.Unavailable, status.Code(err))
		assert.GreaterOrEqual(t, s.calls(), 4)
		for _, at := range s.at {
			assert.False(t, at.Add(30*time.Millisecond).After(dl), "an attempt started %v before the deadline, too late to end", dl.Sub(at))
		}
		assert.True(t, time.Now().Before(dl), "the call waited for a retry it could not make")
	})
}

// The server's pushback and RetryInfo are least delays; a negative
// pushback, or one the deadline cannot wait for, ends the call at once.
func TestClientRetryHonoursThePushback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		retryInfo := func(d time.Duration) error {
			st, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
			require.NoError(t, err)
			return st.Err()
		}
		in, _ := retrying(t, generousRetry)
		for _, c := range []struct {
			name    string
			first   func() (metadata.MD, error)
			timeout time.Duration
			tries   int
			atLeast time.Duration
		}{
			{"pushback", func() (metadata.MD, error) {
				return metadata.Pairs(MetadataRetryPushback, "1500"), status.Error(codes.Unavailable, "down")
			}, 0, 2, 1500 * time.Millisecond},
			{"retry info", func() (metadata.MD, error) { return nil, retryInfo(700 * time.Millisecond) }, 0, 2, 700 * time.Millisecond},
			{"both: the longer", func() (metadata.MD, error) {
				return metadata.Pairs(MetadataRetryPushback, "900"), retryInfo(300 * time.Millisecond)
			}, 0, 2, 900 * time.Millisecond},
			{"negative pushback", refusing("-1"), 0, 1, 0},
			{"garbage pushback", refusing("soon"), 0, 1, 0},
			{"fractional pushback", refusing("1.5"), 0, 1, 0},
			{"empty pushback", refusing(""), 0, 1, 0},
			{"repeated pushback", refusing("10", "20"), 0, 1, 0},
			{"past the deadline", func() (metadata.MD, error) {
				return metadata.Pairs(MetadataRetryPushback, "1500"), status.Error(codes.Unavailable, "down")
			}, time.Second, 1, 0},
			{"past MaxBackoff", func() (metadata.MD, error) {
				return metadata.Pairs(MetadataRetryPushback, "60000"), status.Error(codes.Unavailable, "down")
			}, 0, 1, 0},
		} {
			s := &fakeServer{answer: func(n int) (metadata.MD, error) {
				if n == 1 {
					return c.first()
				}
				return nil, nil
			}}
			ctx := context.Background()
			if c.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.timeout)
				defer cancel()
			}
			start := time.Now()
			err := callThrough(in, ctx, s)
			require.Equal(t, c.tries, s.calls(), c.name)
			if c.tries == 1 {
				assert.Error(t, err, c.name)
				assert.Zero(t, time.Since(start), "%s: waited for a retry it did not make", c.name)
				continue
			}
			require.NoError(t, err, c.name)
			assert.GreaterOrEqual(t, s.at[1].Sub(s.at[0]), c.atLeast, c.name)
		}
	})
}

// refusing answers Unavailable with the grpc-retry-pushback-ms values
// given, each a value of its own.
func refusing(pushbacks ...string) func() (metadata.MD, error) {
	return func() (metadata.MD, error) {
		md := metadata.MD{}
		md.Append(MetadataRetryPushback, pushbacks...)
		return md, status.Error(codes.Unavailable, "down")
	}
}

// Under 64 callers against a server that always fails, retries add at
// most the budget's share of the calls, plus the floor for the time passed
// and the 10 retries the budget may save.
func TestClientRetryBudgetHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in, g := retrying(t, sluice.Retry{Backoff: time.Millisecond, MaxBackoff: time.Millisecond})
		s := &fakeServer{answer: func(int) (metadata.MD, error) {
			time.Sleep(5 * time.Millisecond)
			return nil, status.Error(codes.Unavailable, "down")
		}}
		retrytest.Storm(t, 40, 0.1, 1, func() {
			assert.Equal(t, codes.Unavailable, status.Code(callThrough(in, context.Background(), s)))
		}, s.calls)
		assert.Positive(t, g.Stats().BudgetRefusals)
	})
}

// The client's own rejections are never retried: its limiter's, and its
// breaker's when it opens mid-retry; nor is a call its caller cancelled.
func TestClientNeverRetriesItsOwnRejectionOrACancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limit, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1)
		require.NoError(t, err)
		in, _ := retrying(t, generousRetry, sluice.With(limit))
		s := &fakeServer{answer: unavailable}
		err = callThrough(in, context.Background(), s)
		assert.ErrorIs(t, err, sluice.ErrRateLimited)
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Equal(t, 1, s.calls())

		b, err := breaker.New("dep", breaker.WithConsecutiveFailures(2))
		require.NoError(t, err)
		in, _ = retrying(t, sluice.Retry{Attempts: 5, Budget: 1, MinPerSecond: 100}, sluice.With(b))
		s = &fakeServer{answer: unavailable}
		err = callThrough(in, context.Background(), s)
		assert.ErrorIs(t, err, sluice.ErrCircuitOpen)
		assert.Equal(t, 2, s.calls(), "attempts went on past the breaker's opening")

		in, _ = retrying(t, generousRetry)
		ctx, cancel := context.WithCancel(context.Background())
		s = &fakeServer{answer: func(int) (metadata.MD, error) { cancel(); return nil, status.Error(codes.Unavailable, "down") }}
		assert.Error(t, callThrough(in, ctx, s))
		assert.Equal(t, 1, s.calls())
	})
}

// Against a real sluice server: its rejection is retried by sluice's
// client after its pushback, and the retry succeeds; a pushback the
// call's deadline cannot wait for is not waited for.
func TestClientRetriesASluiceServersRejectionAfterThePushback(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		for _, c := range serverRejections {
			t.Run(c.name, func(t *testing.T) {
				const delay = 150 * time.Millisecond
				p := rejectingOnce(c.cause, delay)
				client, err := sluice.New(sluice.WithRetry(sluice.Retry{Backoff: time.Millisecond, MaxBackoff: time.Second, Budget: 1}))
				require.NoError(t, err)
				t.Cleanup(func() { _ = client.Close() })
				s := start(t, tr, serverOpts(t, WithGuard(mustGuard(t, sluice.With(p)))), clientOpts(t, WithGuard(client))...)
				began := time.Now()
				require.NoError(t, s.check(withTimeout(t)), "the rejection was not retried")
				assert.GreaterOrEqual(t, time.Since(began), delay, "the retry did not wait for the pushback")
				assert.Equal(t, int64(-1), p.n.Load(), "the server's policy was asked twice")

				// A pushback of 2 s against a deadline of 0.5 s.
				p.n.Store(1)
				p.retry = 2 * time.Second
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				began = time.Now()
				err = s.check(ctx)
				assert.Less(t, time.Since(began), 500*time.Millisecond, "the call waited for a retry it could not make")
				assert.Contains(t, []codes.Code{codes.ResourceExhausted, codes.Unavailable}, status.Code(err), "the rejection is the caller's")
				assert.Equal(t, int64(0), p.n.Load(), "retried past the deadline")
			})
		}
	})
}

// A server's pushback is the least wait before a retry, however long: only
// the Retry's MaxBackoff bounds it.
func TestClientHonoursAPushbackOfHours(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in, _ := retrying(t, sluice.Retry{Attempts: 2, Backoff: time.Millisecond, MaxBackoff: 3 * time.Hour, Budget: 1})
		s := &fakeServer{answer: func(n int) (metadata.MD, error) {
			if n == 1 {
				return metadata.Pairs(MetadataRetryPushback, "7200000"), status.Error(codes.Unavailable, "down")
			}
			return nil, nil
		}}
		require.NoError(t, callThrough(in, context.Background(), s))
		require.Equal(t, 2, s.calls())
		assert.GreaterOrEqual(t, s.at[1].Sub(s.at[0]), 2*time.Hour)
	})
}

// slowStream is a server stream that fails, after lasting d, with
// Unavailable and a RetryInfo asking for retry.
type slowStream struct {
	grpc.ClientStream
	d, retry time.Duration
}

func (s slowStream) RecvMsg(any) error {
	time.Sleep(s.d)
	st, _ := status.New(codes.Unavailable, "draining").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(s.retry)})
	return st.Err()
}

// A stream's RetryInfo holds the breaker open for the whole delay from
// when the stream ended, however long it lasted.
func TestStreamRetryInfoHoldsFromItsEnd(t *testing.T) {
	for _, lasted := range []time.Duration{0, 10 * time.Second} {
		t.Run("stream lasted "+lasted.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, err := breaker.New("dep", breaker.WithConsecutiveFailures(100))
				require.NoError(t, err)
				g, err := sluice.New(sluice.With(b), sluice.WithClock(monoclock.New()))
				require.NoError(t, err)
				in, err := StreamClientInterceptor(WithGuard(g))
				require.NoError(t, err)
				desc := &grpc.StreamDesc{ServerStreams: true}
				streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
					return slowStream{d: lasted, retry: 2 * time.Second}, nil
				}
				st, err := in(context.Background(), desc, nil, "/pkg.Svc/Watch", streamer)
				require.NoError(t, err)
				require.Equal(t, codes.Unavailable, status.Code(st.RecvMsg(nil)))
				time.Sleep(time.Second)
				_, err = in(context.Background(), desc, nil, "/pkg.Svc/Watch", streamer)
				assert.ErrorIs(t, err, sluice.ErrCircuitOpen, "held open 2 s from the stream's end")
			})
		})
	}
}

var quickRetry = sluice.Retry{Attempts: 3, Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, Budget: 1, MinPerSecond: 100}

// A response larger than the client's receive limit fails on the client
// with ResourceExhausted after the server did the work and answered OK:
// the server asked for no retry, and trying again only runs the handler
// again (and fails the same way). gRPC's own retries never retry it (the
// response had headers: the RPC was committed).
func TestClientDoesNotRetryItsOwnReceiveLimit(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		g := mustGuard(t, sluice.WithRetry(quickRetry))
		s := start(t, tr, nil, clientOpts(t, WithGuard(g))...)
		err := s.check(withTimeout(t), grpc.MaxCallRecvMsgSize(1))
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
		assert.Equal(t, int64(1), s.health.calls.Load(), "the server's handler ran again for a client-side limit")
		assert.Zero(t, g.Stats().Retries)
	})
}

// A request larger than the client's send limit is refused by gRPC on the
// client with ResourceExhausted, unsent: no server asked for a retry, and
// every retry fails the same way, spending the retry budget that real
// server pushbacks need.
func TestClientDoesNotRetryItsOwnSendLimit(t *testing.T) {
	g := mustGuard(t, sluice.WithRetry(quickRetry))
	s := start(t, transports[0], nil, clientOpts(t, WithGuard(g))...)
	_, err := healthpb.NewHealthClient(s.conn).Check(withTimeout(t), &healthpb.HealthCheckRequest{Service: "xyz"}, grpc.MaxCallSendMsgSize(1))
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Zero(t, s.health.calls.Load())
	assert.Zero(t, g.Stats().Retries, "the budget paid for retries of a deterministic client-side refusal")
}

// A RetryInfo whose delay is negative is a malformed pushback, which ends
// the retries as a negative trailer does: a ResourceExhausted is retried
// only when it asks for a delay, not at once.
func TestClientRetryInfoOfANegativeDelayIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in, _ := retrying(t, generousRetry)
		st, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(-5 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		s := &fakeServer{answer: func(n int) (metadata.MD, error) {
			if n == 1 {
				return nil, st.Err()
			}
			return nil, nil
		}}
		_ = callThrough(in, context.Background(), s)
		assert.Equal(t, 1, s.calls(), "a negative RetryInfo delay was read as a request to retry (ResourceExhausted retried)")
	})
}
