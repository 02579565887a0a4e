package sluicegrpc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/middleware/internal/sfv"
	"github.com/sluice-go/sluice/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// wire is a rejection as a client reads it back from the wire.
type wire struct {
	code   codes.Code
	msg    string
	delay  time.Duration
	retry  bool // a RetryInfo was present
	reason string
	domain string
	policy string
}

func readWire(t *testing.T, err error) wire {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status error: %v", err)
	w := wire{code: st.Code(), msg: st.Message()}
	for _, d := range st.Details() {
		switch v := d.(type) {
		case *errdetails.RetryInfo:
			w.retry = true
			w.delay = v.GetRetryDelay().AsDuration()
		case *errdetails.ErrorInfo:
			w.reason, w.domain, w.policy = v.GetReason(), v.GetDomain(), v.GetMetadata()[metadataPolicy]
		case error:
			t.Fatalf("undecodable detail: %v", v)
		}
	}
	return w
}

// quota reads the RateLimit fields of md back as structured fields.
func quota(t *testing.T, md metadata.MD) (policy, limit sfv.Item, ok bool) {
	t.Helper()
	pv, lv := md.Get(MetadataRateLimitPolicy), md.Get(MetadataRateLimit)
	if len(pv) == 0 && len(lv) == 0 {
		return sfv.Item{}, sfv.Item{}, false
	}
	require.Len(t, pv, 1)
	require.Len(t, lv, 1)
	p, err := sfv.ParseList(pv[0])
	require.NoError(t, err)
	l, err := sfv.ParseList(lv[0])
	require.NoError(t, err)
	require.Len(t, p, 1)
	require.Len(t, l, 1)
	return p[0], l[0], true
}

func fixedWindow(t testing.TB, name string, limit int64, window time.Duration, clk sluice.Clock) *ratelimit.FixedWindow {
	t.Helper()
	l, err := ratelimit.NewFixedWindow(limit, window, ratelimit.WithName(name))
	require.NoError(t, err)
	return l
}

func newBreaker(t testing.TB, name string, clk sluice.Clock, opts ...breaker.Option) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(name, append([]breaker.Option{breaker.WithClock(clk)}, opts...)...)
	require.NoError(t, err)
	return b
}

// causes are the four rejections of the wire table, each with the policy
// that makes it after admitted calls, and what a client must read back.
type cause struct {
	name     string
	policy   func(t *testing.T, clk sluice.Clock) sluice.Policy
	admitted int // calls admitted before the rejection
	want     wire
	quota    bool // RateLimit metadata expected
}

var causes = []cause{
	{
		name: "rate limited",
		policy: func(t *testing.T, clk sluice.Clock) sluice.Policy {
			return fixedWindow(t, "ratelimit/check", 2, 10*time.Second, clk)
		},
		admitted: 2,
		want:     wire{code: codes.ResourceExhausted, delay: 10 * time.Second, reason: reasonRateLimited, policy: "ratelimit/check"},
		quota:    true,
	},
	{
		name: "circuit open",
		policy: func(t *testing.T, clk sluice.Clock) sluice.Policy {
			b := newBreaker(t, "backend", clk, breaker.WithOpenDuration(30*time.Second))
			b.ForceOpen()
			return b
		},
		want: wire{code: codes.Unavailable, delay: 30 * time.Second, reason: reasonCircuitOpen, policy: "breaker/backend"},
	},
	{
		name: "overloaded",
		policy: func(*testing.T, sluice.Clock) sluice.Policy {
			return &refuser{name: "adaptive/cpu", cause: sluice.ErrOverloaded, retry: 2500 * time.Millisecond}
		},
		want: wire{code: codes.Unavailable, delay: 2500 * time.Millisecond, reason: reasonOverloaded, policy: "adaptive/cpu"},
	},
	{
		name: "concurrency limited, delay unknown",
		policy: func(*testing.T, sluice.Clock) sluice.Policy {
			return &refuser{name: "adaptive/inflight", cause: sluice.ErrConcurrencyLimited}
		},
		want: wire{code: codes.Unavailable, delay: time.Second, reason: reasonConcurrencyLimited, policy: "adaptive/inflight"},
	},
}

// calls are the three kinds of call every wire test makes.
var calls = []struct {
	name   string
	method string
	do     func(ctx context.Context, s *server, opts ...grpc.CallOption) error
}{
	{"unary", methodCheck, func(ctx context.Context, s *server, opts ...grpc.CallOption) error { return s.check(ctx, opts...) }},
	{"server stream", methodWatch, func(ctx context.Context, s *server, opts ...grpc.CallOption) error {
		_, err := s.watch(ctx, opts...)
		return err
	}},
	{"bidi stream", methodChat, func(ctx context.Context, s *server, _ ...grpc.CallOption) error {
		_, err := s.chat(ctx, 2)
		return err
	}},
}

func TestServerRejectionOnTheWire(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		for _, c := range causes {
			t.Run(c.name, func(t *testing.T) {
				clk := sluice.NewManualClock(0)
				g := mustGuard(t, sluice.WithClock(clk), sluice.With(c.policy(t, clk)))
				s := start(t, tr, serverOpts(t, WithGuard(g)))
				for _, call := range calls {
					t.Run(call.name, func(t *testing.T) {
						ctx := withTimeout(t)
						if c.admitted > 0 {
							clk.Advance(time.Hour) // a fresh window for each kind of call
						}
						for i := range c.admitted {
							require.NoError(t, call.do(ctx, s), "call %d", i)
						}
						before := s.health.calls.Load()
						var hdr, tlr metadata.MD
						err := call.do(ctx, s, grpc.Header(&hdr), grpc.Trailer(&tlr))
						got := readWire(t, err)
						assert.Equal(t, c.want.code, got.code)
						assert.True(t, got.retry, "RetryInfo missing")
						assert.Equal(t, c.want.delay, got.delay)
						assert.Equal(t, c.want.reason, got.reason)
						assert.Equal(t, errorDomain, got.domain)
						assert.Equal(t, c.want.policy, got.policy)
						assert.Contains(t, got.msg, strings.ToLower(strings.ReplaceAll(c.want.reason, "_", " ")), "the message names the cause")
						assert.Equal(t, before, s.health.calls.Load(), "the handler ran")

						d, ok := RejectionOf(err)
						require.True(t, ok)
						assert.Equal(t, c.want.policy, d.Policy)
						assert.Equal(t, c.want.delay, d.RetryAfter)
						assert.Equal(t, reasonOf(sluice.CauseOf(d.Cause)), c.want.reason)

						if call.method == methodChat {
							return // a raw stream has no grpc.Header call option
						}
						// Trailers-only, so that a client's retryPolicy
						// retries it after the pushback.
						assert.Empty(t, hdr, "a rejection sent a header")
						assert.Equal(t, []string{strconv.FormatInt(c.want.delay.Milliseconds(), 10)}, tlr.Get(MetadataRetryPushback))
						p, l, ok := quota(t, tlr)
						require.Equal(t, c.quota, ok, "RateLimit metadata: %v", tlr)
						if ok {
							assert.Equal(t, c.want.policy, p.Value)
							q, _ := p.Int("q")
							w, _ := p.Int("w")
							r, _ := l.Int("r")
							tt, _ := l.Int("t")
							assert.Equal(t, int64(c.admitted), q)
							assert.Equal(t, int64(10), w)
							assert.Equal(t, int64(0), r)
							assert.GreaterOrEqual(t, int64(c.want.delay/time.Second), tt, "t ≤ RetryInfo's delay")
							assert.Equal(t, int64(10), tt)
						}
					})
				}
			})
		}
	})
}

// TestServerRejectionMessageNamesOnlyTheCause pins that a rejection's message is
// the guard's own, whatever the handlers return.
func TestServerRejectionMessageNamesOnlyTheCause(t *testing.T) {
	st := statusOf(sluice.Decision{Policy: "ratelimit/x", Limit: 5, RetryAfter: 1500 * time.Millisecond, Cause: sluice.ErrRateLimited})
	assert.Equal(t, "sluice: rate limited; retry after 1.5s", st.Message())
	st = statusOf(sluice.Decision{Policy: "breaker/x", Limit: -1, Cause: sluice.ErrCircuitOpen})
	assert.Equal(t, "sluice: circuit open; retry after 1s", st.Message())
	assert.Equal(t, codes.Unavailable, st.Code())
}

var failureCodes = map[codes.Code]bool{
	codes.Unavailable: true, codes.DeadlineExceeded: true, codes.Internal: true,
	codes.Unknown: true, codes.DataLoss: true,
}

// everyErrorCode lists the codes the handlers end with in the trip tests;
// the tests add plainError.
var everyErrorCode = []codes.Code{
	codes.Canceled, codes.Unknown, codes.InvalidArgument, codes.DeadlineExceeded,
	codes.NotFound, codes.AlreadyExists, codes.PermissionDenied, codes.ResourceExhausted,
	codes.FailedPrecondition, codes.Aborted, codes.OutOfRange, codes.Unimplemented,
	codes.Internal, codes.Unavailable, codes.DataLoss, codes.Unauthenticated,
}

// tripTable makes every kind of call end twice with each error code, and
// checks that the failure codes, and only they, trip b (two consecutive
// failures, open for a minute): the next call is then rejected without
// reaching the server.
func tripTable(t *testing.T, s *server, b *breaker.Breaker) {
	for _, call := range calls {
		t.Run(call.name, func(t *testing.T) {
			for _, code := range append([]codes.Code{plainError}, everyErrorCode...) {
				t.Run(strconv.Itoa(int(code)), func(t *testing.T) {
					b.Reset()
					ctx := withTimeout(t)
					for range 2 {
						err := call.do(withCode(ctx, code), s)
						if code == plainError {
							require.Equal(t, codes.Unknown, status.Code(err))
							require.NotContains(t, err.Error(), "sluice")
						} else {
							require.Equal(t, code, status.Code(err))
						}
					}
					before := s.health.calls.Load()
					err := call.do(ctx, s)
					if code != plainError && !failureCodes[code] {
						assert.NoError(t, err, "%v tripped the breaker", code)
						return
					}
					got := readWire(t, err)
					assert.Equal(t, codes.Unavailable, got.code)
					assert.Equal(t, reasonCircuitOpen, got.reason)
					assert.Equal(t, b.Name(), got.policy)
					assert.Equal(t, time.Minute, got.delay)
					d, ok := RejectionOf(err)
					require.True(t, ok)
					assert.ErrorIs(t, d.Cause, sluice.ErrCircuitOpen)
					assert.Equal(t, before, s.health.calls.Load(), "an open breaker let the call through")
				})
			}
		})
	}
}

func TestServerFailureCodesTripTheBreaker(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		clk := sluice.NewManualClock(0)
		b := newBreaker(t, "handler", clk, breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(time.Minute))
		g := mustGuard(t, sluice.WithClock(clk), sluice.With(b))
		tripTable(t, start(t, tr, serverOpts(t, WithGuard(g))), b)
	})
}

func TestServerStreamOutcomeIsRecordedWhenTheStreamEnds(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 8)}
		g := mustGuard(t, sluice.With(rec))
		s := start(t, tr, serverOpts(t, WithGuard(g)))
		ctx := withTimeout(t)

		ctx5 := metadata.AppendToOutgoingContext(withCode(ctx, codes.Internal), mdSends, "5")
		n, err := s.watch(ctx5)
		assert.Equal(t, 5, n)
		assert.Equal(t, codes.Internal, status.Code(err))
		assert.Equal(t, sluice.Failure, rec.next(t))

		n, err = s.chat(ctx, 4)
		require.NoError(t, err)
		assert.Equal(t, 4, n)
		assert.Equal(t, sluice.Success, rec.next(t))

		_, err = s.chat(withCode(ctx, codes.NotFound), 1)
		assert.Equal(t, codes.NotFound, status.Code(err))
		assert.Equal(t, sluice.Ignored, rec.next(t))
		assert.Len(t, rec.Outcomes(), 3, "one outcome per stream")
	})
}

// A client that closes its connection makes the handler's Send fail with
// Unavailable ("transport is closing"): the client went away, which says
// nothing of the server's health, so the stream's outcome is Ignored.
func TestServerStreamWhoseClientWentAwayIsIgnored(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 2)}
		s := start(t, tr, serverOpts(t, WithGuard(mustGuard(t, sluice.With(rec)))))
		ctx := metadata.AppendToOutgoingContext(withTimeout(t), mdSends, "1000000000")
		st, err := healthpb.NewHealthClient(s.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		_, err = st.Recv()
		require.NoError(t, err)
		require.NoError(t, s.conn.Close())
		assert.Equal(t, sluice.Ignored, rec.next(t))
		assert.Len(t, rec.Outcomes(), 1)
	})
}

func TestServerMessageGuardEndsTheStream(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		for _, swallow := range []bool{false, true} {
			t.Run("handler swallows the error="+strconv.FormatBool(swallow), func(t *testing.T) {
				clk := sluice.NewManualClock(0)
				msgs := mustGuard(t, sluice.WithClock(clk), sluice.With(fixedWindow(t, "ratelimit/messages", 3, 10*time.Second, clk)))
				rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 8)}
				streams := mustGuard(t, sluice.With(rec))
				s := start(t, tr, serverOpts(t, WithGuard(streams), WithMessageGuard(msgs, methodChat)))
				ctx := withTimeout(t)
				if swallow {
					ctx = metadata.AppendToOutgoingContext(ctx, mdSwallow, "1")
				}
				n, err := s.chat(ctx, 5)
				assert.Equal(t, 3, n, "echoes before the rejection")
				got := readWire(t, err)
				assert.Equal(t, codes.ResourceExhausted, got.code)
				assert.Equal(t, reasonRateLimited, got.reason)
				assert.Equal(t, "ratelimit/messages", got.policy)
				assert.Equal(t, 10*time.Second, got.delay)
				assert.Equal(t, sluice.Ignored, rec.next(t), "the guard's own rejection counted")

				// Watch is not limited per message.
				clk.Advance(time.Hour)
				_, err = s.watch(metadata.AppendToOutgoingContext(ctx, mdSends, "9"))
				require.NoError(t, err)
				rec.next(t)
			})
		}
	})
}

// A message guard's rejection carries the status of its cause, as every
// rejection does: an open breaker on the messages is Unavailable.
func TestServerMessageGuardRejectionFollowsItsCause(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		clk := sluice.NewManualClock(0)
		b := newBreaker(t, "messages", clk)
		b.ForceOpen()
		msgs := mustGuard(t, sluice.WithClock(clk), sluice.With(b))
		// A message guard alone guards streams only: no unary interceptor.
		s := start(t, tr, []grpc.ServerOption{grpc.StreamInterceptor(stream(t, WithMessageGuard(msgs, methodChat)))})
		n, err := s.chat(withTimeout(t), 2)
		assert.Equal(t, 0, n)
		got := readWire(t, err)
		assert.Equal(t, codes.Unavailable, got.code)
		assert.Equal(t, reasonCircuitOpen, got.reason)
	})
}

// A stream that gRPC ends itself after a failed Send (a message it cannot
// marshal: Internal), cancelling its context, ended by the server's fault:
// the client is still there and hears Internal, and the stream is a
// Failure, not a client gone.
func TestServerStreamEndedByTheServerIsNotAClientGone(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 2)}
		g := mustGuard(t, sluice.With(rec))
		e := listen(t, tr)
		s := grpc.NewServer(serverOpts(t, WithGuard(g))...)
		s.RegisterService(&grpc.ServiceDesc{
			ServiceName: "sluice.test.Bad",
			HandlerType: (*any)(nil),
			Streams: []grpc.StreamDesc{{
				StreamName:    "Send",
				ServerStreams: true,
				ClientStreams: true,
				Handler: func(_ any, ss grpc.ServerStream) error {
					return ss.SendMsg(struct{}{}) // not a proto.Message: Internal
				},
			}},
		}, nil)
		var wg sync.WaitGroup
		wg.Go(func() { _ = s.Serve(e.l) })
		cc, err := grpc.NewClient(e.target, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, e.dial...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = cc.Close(); s.Stop(); wg.Wait() })

		st, err := cc.NewStream(withTimeout(t), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/sluice.test.Bad/Send")
		require.NoError(t, err)
		require.NoError(t, st.CloseSend())
		err = st.RecvMsg(new(struct{}))
		assert.Equal(t, codes.Internal, status.Code(err), "the client is there and hears the server's Internal")
		assert.Equal(t, sluice.Failure, rec.next(t), "the server's Internal was counted as a client gone")
	})
}

// A sluice rejection a stream's handler returns ends the stream with the
// rejection's status on a stream let through unguarded too (a method
// without a Guard), not codes.Unknown with the handler's text.
func TestUnguardedStreamHandlerReturningARejection(t *testing.T) {
	d := sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: 2 * time.Second, Cause: sluice.ErrCircuitOpen}
	s := stream(t, WithMethodGuard(methodWatch, mustGuard(t)))
	err := s(nil, fakeStream{ctx: context.Background()}, &grpc.StreamServerInfo{FullMethod: methodChat}, func(any, grpc.ServerStream) error {
		return fmt.Errorf("watch db-7: %w", sluice.Rejection(d))
	})
	st := status.Convert(err)
	assert.Equal(t, codes.Unavailable, st.Code(), "status: %v", st)
	assert.NotContains(t, st.Message(), "db-7")
	_, ok := RejectionOf(err)
	assert.True(t, ok, "RejectionOf reads no rejection out of %v", err)
}
