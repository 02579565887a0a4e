package sluicegrpc

import (
	"context"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func clientOpts(t testing.TB, opts ...Option) []grpc.DialOption {
	t.Helper()
	u, err := UnaryClientInterceptor(opts...)
	require.NoError(t, err)
	s, err := StreamClientInterceptor(opts...)
	require.NoError(t, err)
	return []grpc.DialOption{grpc.WithUnaryInterceptor(u), grpc.WithStreamInterceptor(s)}
}

func TestClientFailureCodesTripTheBreakerAndItFailsFast(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		clk := sluice.NewManualClock(0)
		b := newBreaker(t, "dependency", clk, breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(time.Minute))
		g := mustGuard(t, sluice.WithClock(clk), sluice.With(b))
		tripTable(t, start(t, tr, nil, clientOpts(t, WithGuard(g))...), b)
	})
}

func TestClientRateLimitFailsWithoutCallingTheServer(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		clk := sluice.NewManualClock(0)
		g := mustGuard(t, sluice.WithClock(clk), sluice.With(fixedWindow(t, "ratelimit/out", 1, time.Second, clk)))
		s := start(t, tr, nil, clientOpts(t, WithGuard(g))...)
		ctx := withTimeout(t)
		for _, call := range calls {
			clk.Advance(time.Second)
			require.NoError(t, call.do(ctx, s), call.name)
			err := call.do(ctx, s)
			got := readWire(t, err)
			assert.Equal(t, codes.ResourceExhausted, got.code, call.name)
			assert.Equal(t, reasonRateLimited, got.reason, call.name)
			assert.ErrorIs(t, err, sluice.ErrRejected)
		}
		assert.Equal(t, int64(len(calls)), s.health.calls.Load())
	})
}

// TestClientCountsServerRejectionsByCode pins how a client
// breaker counts a sluice server's own rejections: a peer that sheds load
// (Unavailable) is failing, a peer that rate-limits this client is not.
func TestClientCountsServerRejectionsByCode(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		shed := &refuser{name: "adaptive/cpu", cause: sluice.ErrOverloaded, retry: time.Second}
		limit := &refuser{name: "ratelimit/x", cause: sluice.ErrRateLimited, retry: time.Second}
		rec := &recorder{name: "rec"}
		s := start(t, tr, serverOpts(t, WithMethodGuard(methodCheck, mustGuard(t, sluice.With(shed))), WithMethodGuard(methodWatch, mustGuard(t, sluice.With(limit)))),
			clientOpts(t, WithGuard(mustGuard(t, sluice.With(rec))))...)
		ctx := withTimeout(t)
		err := s.check(ctx)
		d, ok := RejectionOf(err)
		require.True(t, ok)
		assert.ErrorIs(t, d.Cause, sluice.ErrOverloaded)
		_, err = s.watch(ctx)
		d, ok = RejectionOf(err)
		require.True(t, ok)
		assert.ErrorIs(t, d.Cause, sluice.ErrRateLimited)
		assert.Equal(t, []sluice.Outcome{sluice.Failure, sluice.Ignored}, rec.Outcomes())
	})
}

func TestClientGuardPerTarget(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		clk := sluice.NewManualClock(0)
		ea, eb := listen(t, tr), listen(t, tr)
		ba := newBreaker(t, "a", clk, breaker.WithConsecutiveFailures(1))
		bdef := newBreaker(t, "default", clk, breaker.WithConsecutiveFailures(1))
		// One interceptor pair for both connections; a's target has its own
		// breaker, b's calls go to the default one.
		opts := clientOpts(t, WithTargetGuard(ea.target, mustGuard(t, sluice.WithClock(clk), sluice.With(ba))),
			WithGuard(mustGuard(t, sluice.WithClock(clk), sluice.With(bdef))))
		sa, sb := serve(t, ea, nil, opts...), serve(t, eb, nil, opts...)
		ctx := withTimeout(t)

		require.Error(t, sa.check(withCode(ctx, codes.Unavailable)))
		got := readWire(t, sa.check(ctx))
		assert.Equal(t, "breaker/a", got.policy)
		assert.Equal(t, breaker.StateClosed, bdef.State())
		require.NoError(t, sb.check(ctx), "the other target's calls go on")

		require.Error(t, sb.check(withCode(ctx, codes.Internal)))
		got = readWire(t, sb.check(ctx))
		assert.Equal(t, "breaker/default", got.policy)
	})
}

func TestClientMethodGuardWinsOverTarget(t *testing.T) {
	e := listen(t, transports[0])
	shut := &refuser{name: "m", cause: sluice.ErrCircuitOpen}
	s := serve(t, e, nil, clientOpts(t,
		WithTargetGuard(e.target, mustGuard(t, sluice.With(shut))),
		WithMethodGuard(methodCheck, mustGuard(t)))...)
	ctx := withTimeout(t)
	require.NoError(t, s.check(ctx), "the method's own Guard, which admits every call, decides")
	_, err := s.watch(ctx)
	assert.Equal(t, codes.Unavailable, status.Code(err))
}

func TestClientStreamOutcomes(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 8)}
		s := start(t, tr, nil, clientOpts(t, WithGuard(mustGuard(t, sluice.With(rec))))...)
		ctx := withTimeout(t)

		_, err := s.watch(withCode(ctx, codes.DataLoss))
		assert.Equal(t, codes.DataLoss, status.Code(err))
		assert.Equal(t, sluice.Failure, rec.next(t))

		_, err = s.chat(ctx, 3)
		require.NoError(t, err)
		assert.Equal(t, sluice.Success, rec.next(t))

		// A stream its caller abandons by cancelling ends when the context
		// does: a cancellation says nothing of the server's health.
		cctx, cancel := context.WithCancel(ctx)
		st, err := s.conn.NewStream(cctx, chatStreamDesc, methodChat)
		require.NoError(t, err)
		require.NoError(t, st.SendMsg(wrapperspb.String("hi")))
		var m wrapperspb.StringValue
		require.NoError(t, st.RecvMsg(&m))
		cancel()
		assert.Equal(t, sluice.Ignored, rec.next(t))
		assert.Len(t, rec.Outcomes(), 3)
	})
}

func TestClientTimeoutIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		b := newBreaker(t, "slow", clk, breaker.WithConsecutiveFailures(1))
		g := mustGuard(t, sluice.WithClock(clk), sluice.With(b))
		i, err := UnaryClientInterceptor(WithGuard(g), WithTimeout(300*time.Millisecond))
		require.NoError(t, err)
		var waited time.Duration
		slow := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			start := time.Now()
			<-ctx.Done()
			waited = time.Since(start)
			return status.FromContextError(ctx.Err()).Err()
		}
		err = i(context.Background(), methodCheck, nil, nil, nil, slow)
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
		assert.Equal(t, 300*time.Millisecond, waited)
		assert.Equal(t, breaker.StateOpen, b.State())

		// A caller's own shorter deadline stands.
		b.Reset()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		err = i(ctx, methodCheck, nil, nil, nil, slow)
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
		assert.Equal(t, 100*time.Millisecond, waited)
	})
}

func TestClientHoldsTheBreakerOpenForTheServersRetryInfo(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		tests := []struct {
			name     string
			cause    error
			opts     []Option
			wantHold time.Duration
		}{
			{name: "overloaded server", cause: sluice.ErrOverloaded, wantHold: 20 * time.Second},
			{name: "rate-limited client", cause: sluice.ErrRateLimited, wantHold: 20 * time.Second},
			{name: "capped", cause: sluice.ErrCircuitOpen, opts: []Option{WithMaxRetryDelay(5 * time.Second)}, wantHold: 5 * time.Second},
		}
		for _, tc := range tests {
			for _, call := range calls {
				t.Run(tc.name+"/"+call.name, func(t *testing.T) {
					clk := sluice.NewManualClock(0)
					seen := &recorder{name: "seen"}
					shed := &refuser{name: "remote", cause: tc.cause, retry: 20 * time.Second}
					b := newBreaker(t, "dep", clk, breaker.WithConsecutiveFailures(100))
					g := mustGuard(t, sluice.WithClock(clk), sluice.With(b))
					s := start(t, tr, serverOpts(t, WithGuard(mustGuard(t, sluice.With(seen, shed)))),
						clientOpts(t, append([]Option{WithGuard(g)}, tc.opts...)...)...)
					ctx := withTimeout(t)

					got := readWire(t, call.do(ctx, s))
					assert.Equal(t, "remote", got.policy)
					got = readWire(t, call.do(ctx, s))
					assert.Equal(t, "breaker/dep", got.policy, "the client's breaker did not hold")
					assert.Equal(t, tc.wantHold, got.delay)
					assert.Len(t, seen.Keys(), 1, "the held breaker let a call through")

					shed.off.Store(true)
					clk.Advance(tc.wantHold)
					require.NoError(t, call.do(ctx, s))
				})
			}
		}
	})
}

// WithMaxRetryDelay(0) turns the holding off: a server's RetryInfo (one
// tenant's quota, say) leaves the client's breaker closed.
func TestClientWithoutRetryInfoHolding(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := newBreaker(t, "dep", clk, breaker.WithConsecutiveFailures(100))
	g := mustGuard(t, sluice.WithClock(clk), sluice.With(b))
	shed := &refuser{name: "remote", cause: sluice.ErrRateLimited, retry: 20 * time.Second}
	s := start(t, transports[0], serverOpts(t, WithGuard(mustGuard(t, sluice.With(shed)))),
		clientOpts(t, WithGuard(g), WithMaxRetryDelay(0))...)
	ctx := withTimeout(t)
	for range 3 {
		assert.Equal(t, "remote", readWire(t, s.check(ctx)).policy)
	}
	assert.Equal(t, breaker.StateClosed, b.State())
}

func TestClientWithoutRetryInfoDoesNotHoldTheBreaker(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := newBreaker(t, "dep", clk, breaker.WithConsecutiveFailures(100))
	g := mustGuard(t, sluice.WithClock(clk), sluice.With(b))
	s := start(t, transports[0], nil, clientOpts(t, WithGuard(g))...)
	ctx := withTimeout(t)
	require.Error(t, s.check(withCode(ctx, codes.Unavailable)))
	assert.Equal(t, breaker.StateClosed, b.State())
}

func TestClientKeysFromOutgoingMetadata(t *testing.T) {
	rec := &recorder{name: "rec"}
	s := start(t, transports[0], nil, clientOpts(t, WithGuard(mustGuard(t, sluice.With(rec))),
		withKey(t, middleware.MissingKey{}, middleware.KeyByHeader("x-tenant"), middleware.KeyByRoute()))...)
	ctx := withTimeout(t)
	require.NoError(t, s.check(metadata.AppendToOutgoingContext(ctx, "x-tenant", "acme")))
	_, err := s.watch(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"acme", "1:" + methodWatch}, rec.Keys())
}

// grpc ends a stream whose ClientConn closes, without RecvMsg, SendMsg or
// the caller's context telling: the interceptor still ends its admission,
// as Ignored (the client itself went away).
func TestClientStreamEndedByClosingItsConnIsRecorded(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 2)}
		s := start(t, tr, nil, clientOpts(t, WithGuard(mustGuard(t, sluice.With(rec))))...)
		st, err := s.conn.NewStream(withTimeout(t), chatStreamDesc, methodChat)
		require.NoError(t, err)
		require.NoError(t, st.SendMsg(wrapperspb.String("hi")))
		require.NoError(t, st.RecvMsg(new(wrapperspb.StringValue)))
		require.NoError(t, s.conn.Close())
		assert.Equal(t, sluice.Ignored, rec.next(t))
		assert.Len(t, rec.Outcomes(), 1)
	})
}

// A stream its caller cancels is Ignored under a classifier by gRPC code
// too: the classifier sees codes.Canceled, not a bare context.Canceled
// (which a status reads as Unknown, a failure).
func TestClientStreamCancelledByItsCallerIsIgnoredByACodeClassifier(t *testing.T) {
	rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 2)}
	seen := make(chan codes.Code, 2)
	byCode := func(err error) sluice.Outcome {
		seen <- status.Code(err)
		return classifyCode(status.Code(err))
	}
	i, err := StreamClientInterceptor(WithGuard(mustGuard(t, sluice.With(rec))), WithClassifier(byCode))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	_, err = i(ctx, desc, nil, methodChat, func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return failingStream{}, nil
	})
	require.NoError(t, err)
	cancel()
	assert.Equal(t, sluice.Ignored, rec.next(t))
	assert.Equal(t, codes.Canceled, <-seen)
}

// failingStream is a client stream whose SendMsg fails with its error.
type failingStream struct {
	grpc.ClientStream
	err error
}

func (f failingStream) SendMsg(any) error { return f.err }

func TestClientStreamEndsOnOpenAndSendErrors(t *testing.T) {
	rec := &recorder{name: "rec"}
	i, err := StreamClientInterceptor(WithGuard(mustGuard(t, sluice.With(rec))),
		WithSkipper(middleware.SkipRoutes(methodWatch)))
	require.NoError(t, err)
	ctx := context.Background()
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

	unavailable := status.Error(codes.Unavailable, "no connection")
	_, err = i(ctx, desc, nil, methodChat, func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return nil, unavailable
	})
	assert.Equal(t, unavailable, err)

	marshal := status.Error(codes.Internal, "cannot marshal")
	st, err := i(ctx, desc, nil, methodChat, func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return failingStream{err: marshal}, nil
	})
	require.NoError(t, err)
	assert.Equal(t, marshal, st.SendMsg(nil))
	assert.Equal(t, marshal, st.SendMsg(nil), "a second error is not counted again")

	st, err = i(ctx, desc, nil, methodChat, func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return failingStream{err: io.EOF}, nil
	})
	require.NoError(t, err)
	assert.Equal(t, io.EOF, st.SendMsg(nil), "io.EOF leaves the status to RecvMsg")

	_, err = i(ctx, desc, nil, methodWatch, func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return failingStream{}, nil
	})
	require.NoError(t, err)
	assert.Equal(t, []sluice.Outcome{sluice.Failure, sluice.Failure}, rec.Outcomes())
	assert.Len(t, rec.Keys(), 3, "the skipped stream was admitted")
}

// A Guard's own call timeout (sluice.WithTimeout) applies to the calls it
// guards, on the client and on the server: the call's context ends at the
// deadline, the caller gets DeadlineExceeded, and a breaker counts it.
func TestGuardTimeoutAppliesToUnaryCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monoclock.New()
		b := newBreaker(t, "slow", clk, breaker.WithConsecutiveFailures(2))
		g := mustGuard(t, sluice.WithClock(clk), sluice.With(b), sluice.WithTimeout(200*time.Millisecond))
		var waited time.Duration
		slowInvoke := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			start := time.Now()
			<-ctx.Done()
			waited = time.Since(start)
			return status.FromContextError(ctx.Err()).Err()
		}
		client, err := UnaryClientInterceptor(WithGuard(g))
		require.NoError(t, err)
		err = client(context.Background(), methodCheck, nil, nil, nil, slowInvoke)
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
		assert.Equal(t, 200*time.Millisecond, waited)

		slowHandle := func(ctx context.Context, _ any) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		server, err := UnaryServerInterceptor(WithGuard(g))
		require.NoError(t, err)
		_, err = server(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, slowHandle)
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
		assert.Contains(t, status.Convert(err).Message(), "sluice: timeout")
		assert.Equal(t, breaker.StateOpen, b.State(), "two timeouts in a row open the breaker")
	})
}

// TestClientCallWithAnEndedContextIsNotCounted: a handler whose inherited
// deadline already passed calls its dependency. gRPC never sends the call;
// counted as DeadlineExceeded, three of them opened the breaker of a server
// that never heard of them.
func TestClientCallWithAnEndedContextIsNotCounted(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		clk := sluice.NewManualClock(0)
		b := newBreaker(t, "dependency", clk, breaker.WithConsecutiveFailures(1))
		rec := &recorder{name: "rec"}
		limit := fixedWindow(t, "ratelimit/out", 1, time.Second, clk)
		g := mustGuard(t, sluice.WithClock(clk), sluice.With(b, limit, rec))
		s := start(t, tr, nil, clientOpts(t, WithGuard(g), WithTimeout(time.Second))...)

		expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		cancelled, cancel2 := context.WithCancel(context.Background())
		cancel2()
		for range 3 {
			assert.Equal(t, codes.DeadlineExceeded, status.Code(s.check(expired)))
			_, err := s.watch(expired)
			assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
			_, err = s.chat(expired, 1)
			assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
			assert.Equal(t, codes.Canceled, status.Code(s.check(cancelled)))
		}
		assert.Equal(t, breaker.StateClosed, b.State())
		assert.Empty(t, rec.Outcomes(), "the Guard was not asked")
		assert.Zero(t, s.health.calls.Load())
		// Nor did they take the rate limit's one call.
		require.NoError(t, s.check(withTimeout(t)))
	})
}

// A server's RetryInfo holds open, of a breaker.Group keyed by method, the
// breaker of the method that was answered alone.
func TestClientHoldsTheGroupsBreakerOfTheCall(t *testing.T) {
	clk := sluice.NewManualClock(0)
	group, err := breaker.NewGroup("dep", breaker.WithConsecutiveFailures(100))
	require.NoError(t, err)
	g := mustGuard(t, sluice.WithClock(clk), sluice.With(group))
	shed := &refuser{name: "remote", cause: sluice.ErrOverloaded, retry: 20 * time.Second}
	s := start(t, transports[0], serverOpts(t, WithMethodGuard(methodCheck, mustGuard(t, sluice.With(shed)))),
		clientOpts(t, WithGuard(g), WithMethodResource())...)
	ctx := withTimeout(t)
	assert.Equal(t, "remote", readWire(t, s.check(ctx)).policy)
	assert.Equal(t, "breaker/dep", readWire(t, s.check(ctx)).policy, "the Check breaker holds")
	_, err = s.watch(ctx)
	require.NoError(t, err, "the Watch breaker does not")
	b, ok := group.Get(methodCheck)
	require.True(t, ok)
	assert.Equal(t, breaker.StateOpen, b.State())
}

// A call or stream whose context ends while a policy of the Guard makes it
// wait (a shaper's turn due at the deadline) is not sent: it gives back what
// the Guard took and is no failure of the server.
func TestClientCallWhoseContextEndsInTheGuardIsReleased(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := newBreaker(t, "dependency", clk, breaker.WithConsecutiveFailures(1))
	rec := &recorder{name: "rec"}
	ends := &testpolicy.EndsOnAdmit{}
	g := mustGuard(t, sluice.WithClock(clk), sluice.With(b, rec, ends))
	s := start(t, transports[0], nil, clientOpts(t, WithGuard(g))...)

	ctx := testpolicy.NewEndingContext()
	ends.Set(ctx)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(s.check(ctx)))
	ctx = testpolicy.NewEndingContext()
	ends.Set(ctx)
	_, err := s.watch(ctx)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
	assert.Equal(t, breaker.StateClosed, b.State())
	assert.Equal(t, []sluice.Outcome{sluice.Released, sluice.Released}, rec.Outcomes())
	assert.Zero(t, s.health.calls.Load())
}

// A client call's resource is its own method, not one it inherits from the
// inbound call whose handler makes it: a client-side breaker.Group keeps a
// breaker per outgoing method, unary or streaming, even from a handler of a
// guarded server.
func TestClientCallsAreTheirMethodsResource(t *testing.T) {
	group, err := breaker.NewGroup("deps", breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(time.Minute))
	require.NoError(t, err)
	g := mustGuard(t, sluice.With(group))
	u, err := UnaryClientInterceptor(WithGuard(g))
	require.NoError(t, err)
	s, err := StreamClientInterceptor(WithGuard(g))
	require.NoError(t, err)
	inbound := sluice.WithResource(context.Background(), "/frontend.Shop/Order")
	var seen string
	call := func(method string, fail bool) error {
		return u(inbound, method, nil, nil, nil, func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			seen, _ = sluice.ResourceFrom(ctx)
			if fail {
				return status.Error(codes.Unavailable, "down")
			}
			return nil
		})
	}
	for range 2 {
		assert.Equal(t, codes.Unavailable, status.Code(call(methodCheck, true)))
	}
	assert.Equal(t, methodCheck, seen, "the outgoing call's resource")
	_, open := RejectionOf(call(methodCheck, false))
	assert.True(t, open, "the failing method's circuit is open")
	assert.NoError(t, call(methodWatch, false), "another method has its own breaker")
	_, err = s(inbound, &grpc.StreamDesc{ServerStreams: true}, nil, methodWatch,
		func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
			seen, _ = sluice.ResourceFrom(ctx)
			return nil, status.Error(codes.Unavailable, "down")
		})
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Equal(t, methodWatch, seen, "the outgoing stream's resource")
	_, ok := group.Get("/frontend.Shop/Order")
	assert.False(t, ok, "the inbound method has no breaker of the client's")
}

// A dependency that answers NotFound just past the client Guard's deadline
// (sluice.WithTimeout): the caller gets that NotFound, counted as Ignored,
// as the server interceptor sends a NotFound returned past its deadline
// and the net/http Transport returns a 404 answered past it; not a
// DeadlineExceeded failure that trips the client's breakers.
func TestAClientNotFoundPastTheDeadlineGoesBackAsItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testpolicy.NewCounter()
		g := mustGuard(t, sluice.With(c), sluice.WithTimeout(100*time.Millisecond))
		client, err := UnaryClientInterceptor(WithGuard(g))
		require.NoError(t, err)
		invoke := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			<-ctx.Done() // a slow lookup whose answer lands as the deadline passes
			return status.Error(codes.NotFound, "no such user")
		}
		err = client(context.Background(), methodCheck, nil, nil, nil, invoke)
		assert.Equal(t, codes.NotFound, status.Code(err), "the dependency's NotFound was replaced: %v", err)
		assert.Zero(t, c.Outcomes()[sluice.Failure], "a NotFound counted as a failure: %v", c.Outcomes())
	})
}
