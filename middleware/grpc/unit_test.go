package sluicegrpc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/timeouterr"
	"github.com/sluice-go/sluice/middleware"
)

func TestClassify(t *testing.T) {
	rejected := newRejection(nil, sluice.Decision{Policy: "p", Limit: -1, Cause: sluice.ErrCircuitOpen})
	tests := []struct {
		name string
		err  error
		want sluice.Outcome
	}{
		{"nil", nil, sluice.Success},
		{"OK status", status.Error(codes.OK, ""), sluice.Success},
		{"Unavailable", status.Error(codes.Unavailable, "x"), sluice.Failure},
		{"DeadlineExceeded", status.Error(codes.DeadlineExceeded, "x"), sluice.Failure},
		{"Internal", status.Error(codes.Internal, "x"), sluice.Failure},
		{"Unknown", status.Error(codes.Unknown, "x"), sluice.Failure},
		{"DataLoss", status.Error(codes.DataLoss, "x"), sluice.Failure},
		{"InvalidArgument", status.Error(codes.InvalidArgument, "x"), sluice.Ignored},
		{"NotFound", status.Error(codes.NotFound, "x"), sluice.Ignored},
		{"ResourceExhausted", status.Error(codes.ResourceExhausted, "x"), sluice.Ignored},
		{"Canceled", status.Error(codes.Canceled, "x"), sluice.Ignored},
		{"plain error", errors.New("boom"), sluice.Failure},
		{"context canceled", context.Canceled, sluice.Ignored},
		{"context deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), sluice.Failure},
		{"own rejection (Unavailable)", rejected, sluice.Ignored},
		{"sluice.Rejection", sluice.Rejection(sluice.Decision{Cause: sluice.ErrOverloaded}), sluice.Ignored},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, Classify(tc.err)) })
	}
}

func TestWithClassifierOverridesButNeverCountsOwnRejections(t *testing.T) {
	rec := &recorder{name: "rec"}
	g := mustGuard(t, sluice.With(rec))
	// Count NotFound as a failure, and everything else as a success.
	c := func(err error) sluice.Outcome {
		if status.Code(err) == codes.NotFound {
			return sluice.Failure
		}
		return sluice.Success
	}
	i := unary(t, WithGuard(g), WithClassifier(c))
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	for _, err := range []error{
		status.Error(codes.NotFound, "x"),
		status.Error(codes.Unavailable, "x"),
		rejectionError(sluice.Rejection(sluice.Decision{Policy: "inner", Limit: -1, Cause: sluice.ErrRateLimited})),
	} {
		_, got := i(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, err })
		assert.Equal(t, err, got, "the interceptor changed the handler's error")
	}
	assert.Equal(t, []sluice.Outcome{sluice.Failure, sluice.Success, sluice.Ignored}, rec.Outcomes())
}

// A classifier is asked only for errors, as a Guard asks a sluice.Classifier:
// a handler that returned nil is a Success even under a classifier that calls
// every error a failure.
func TestWithClassifierIsNotAskedForNil(t *testing.T) {
	rec := &recorder{name: "rec"}
	everyErrorFails := func(error) sluice.Outcome { return sluice.Failure }
	i := unary(t, WithGuard(mustGuard(t, sluice.With(rec))), WithClassifier(everyErrorFails))
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	for _, err := range []error{nil, status.Error(codes.NotFound, "x")} {
		_, _ = i(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, err })
	}
	assert.Equal(t, []sluice.Outcome{sluice.Success, sluice.Failure}, rec.Outcomes())
}

func TestNestedGuardRejectionDoesNotTripTheOuterBreaker(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := newBreaker(t, "outer", clk, breaker.WithConsecutiveFailures(1))
	i := unary(t, WithGuard(mustGuard(t, sluice.WithClock(clk), sluice.With(b))))
	inner := mustGuard(t, sluice.With(&refuser{name: "adaptive/inner", cause: sluice.ErrOverloaded, retry: time.Second}))
	handler := func(ctx context.Context, _ any) (any, error) {
		return nil, rejectionError(inner.Do(ctx, func(context.Context) error { return nil }))
	}
	_, err := i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, handler)
	got := readWire(t, err)
	assert.Equal(t, codes.Unavailable, got.code)
	assert.Equal(t, "adaptive/inner", got.policy)
	assert.Equal(t, breaker.StateClosed, b.State())
}

func TestErrorConverts(t *testing.T) {
	assert.NoError(t, rejectionError(nil))
	plain := errors.New("x")
	assert.Same(t, plain, rejectionError(plain))
	re := sluice.Rejection(sluice.Decision{Policy: "ratelimit/a", Limit: 10, RetryAfter: 3 * time.Second, Cause: sluice.ErrRateLimited})
	err := rejectionError(fmt.Errorf("wrapped: %w", re))
	assert.ErrorIs(t, err, sluice.ErrRejected)
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, "rpc error: code = ResourceExhausted desc = sluice: rate limited; retry after 3s", err.Error())
	assert.Same(t, err, rejectionError(err), "converting twice")
	d, ok := RejectionOf(err)
	require.True(t, ok)
	assert.Equal(t, 3*time.Second, d.RetryAfter)
	_, ok = RejectionOf(status.Error(codes.Unavailable, "not ours"))
	assert.False(t, ok)
	_, ok = RejectionOf(plain)
	assert.False(t, ok)
}

func TestCodesAndReasons(t *testing.T) {
	tests := []struct {
		cause  sluice.Cause
		code   codes.Code
		reason string
	}{
		{sluice.CauseRateLimited, codes.ResourceExhausted, reasonRateLimited},
		{sluice.CauseCircuitOpen, codes.Unavailable, reasonCircuitOpen},
		{sluice.CauseOverloaded, codes.Unavailable, reasonOverloaded},
		{sluice.CauseConcurrencyLimited, codes.Unavailable, reasonConcurrencyLimited},
		{sluice.CauseTimeout, codes.DeadlineExceeded, reasonTimeout},
		{sluice.CauseNone, codes.Unavailable, reasonRejected},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.code, codeOf(tc.cause), tc.cause.String())
		assert.Equal(t, tc.reason, reasonOf(tc.cause), tc.cause.String())
		assert.Equal(t, tc.cause, sluice.CauseOf(causeOfReason(tc.reason)))
	}
}

func TestHandlerPanicIsAFailureAndGoesOn(t *testing.T) {
	rec := &recorder{name: "rec"}
	g := mustGuard(t, sluice.With(rec))
	i := unary(t, WithGuard(g))
	assert.Panics(t, func() {
		_, _ = i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, func(context.Context, any) (any, error) { panic("boom") })
	})
	s := stream(t, WithGuard(g))
	assert.Panics(t, func() {
		_ = s(nil, fakeStream{ctx: context.Background()}, &grpc.StreamServerInfo{FullMethod: methodChat}, func(any, grpc.ServerStream) error { panic("boom") })
	})
	assert.Equal(t, []sluice.Outcome{sluice.Failure, sluice.Failure}, rec.Outcomes())
}

// fakeStream is a grpc.ServerStream with nothing behind it, for calling the
// stream interceptor directly.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f fakeStream) Context() context.Context    { return f.ctx }
func (f fakeStream) SetHeader(metadata.MD) error { return nil }
func (f fakeStream) SetTrailer(metadata.MD)      {}

func TestUnguardedMethodsPassThrough(t *testing.T) {
	rec := &recorder{name: "rec"}
	i := unary(t, WithMethodGuard(methodWatch, mustGuard(t, sluice.With(rec))))
	_, err := i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, func(context.Context, any) (any, error) { return nil, nil })
	require.NoError(t, err)
	assert.Empty(t, rec.Outcomes())
	i = unary(t, WithGuard(mustGuard(t, sluice.With(rec))), WithSkipper(func(r middleware.Request) bool { return r.Route() == methodCheck }))
	_, err = i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, func(context.Context, any) (any, error) { return nil, nil })
	require.NoError(t, err)
	assert.Empty(t, rec.Outcomes(), "a skipped method passes by the default Guard")
}

func TestOptionsAreValidated(t *testing.T) {
	g := mustGuard(t)
	table, err := middleware.NewRoutes(middleware.RouteTo(methodCheck, g))
	require.NoError(t, err)
	empty, err := middleware.NewRoutes()
	require.NoError(t, err)
	keyer, err := middleware.NewKeyer(middleware.SharedKey("unknown"), middleware.KeyByHeader("x-api-key"))
	require.NoError(t, err)
	skipNone := func(middleware.Request) bool { return false }
	tests := []struct {
		name string
		opts []Option
	}{
		{"no guard", nil},
		{"no guard, only other options", []Option{WithKeyer(keyer), WithQuotaMetadata()}},
		{"nil guard", []Option{WithGuard(nil)}},
		{"nil method guard", []Option{WithGuard(g), WithMethodGuard(methodCheck, nil)}},
		{"routes and guard", []Option{WithRoutes(table), WithGuard(g)}},
		{"routes and method guard", []Option{WithRoutes(table), WithMethodGuard(methodCheck, g)}},
		{"routes twice", []Option{WithRoutes(table), WithRoutes(table)}},
		{"routes without a guard", []Option{WithRoutes(empty)}},
		{"keyer twice", []Option{WithGuard(g), WithKeyer(keyer), WithKeyer(keyer)}},
		{"skipper twice", []Option{WithGuard(g), WithSkipper(skipNone), WithSkipper(skipNone)}},
		{"classifier twice", []Option{WithGuard(g), WithClassifier(Classify), WithClassifier(Classify)}},
		{"quota metadata twice", []Option{WithGuard(g), WithQuotaMetadata(), WithQuotaMetadata()}},
		{"method resource twice", []Option{WithGuard(g), WithMethodResource(), WithMethodResource()}},
		{"critical methods twice", []Option{WithGuard(g), WithCriticalMethods(methodCheck), WithCriticalMethods(methodWatch)}},
		{"critical method named twice", []Option{WithGuard(g), WithCriticalMethods(methodCheck, methodCheck)}},
		{"critical method without a guard", []Option{WithMethodGuard(methodWatch, g), WithCriticalMethods(methodCheck)}},
		{"critical method off the table", []Option{WithRoutes(table), WithCriticalMethods(methodWatch)}},
		{"message method named twice", []Option{WithGuard(g), WithMessageGuard(g, methodChat, methodChat)}},
		{"default twice", []Option{WithGuard(g), WithGuard(g)}},
		{"method without slash", []Option{WithMethodGuard("pkg.Svc/M", g)}},
		{"method without name", []Option{WithMethodGuard("/pkg.Svc/", g)}},
		{"method twice", []Option{WithMethodGuard(methodCheck, g), WithMethodGuard(methodCheck, g)}},
		{"nil routes", []Option{WithRoutes(nil)}},
		{"nil keyer", []Option{WithKeyer(nil)}},
		{"nil skipper", []Option{WithSkipper(nil)}},
		{"nil classifier", []Option{WithClassifier(nil)}},
		{"no critical method", []Option{WithCriticalMethods()}},
		{"bad critical method", []Option{WithCriticalMethods("Check")}},
		{"nil message guard", []Option{WithMessageGuard(nil)}},
		{"bad message method", []Option{WithMessageGuard(g, "Chat")}},
		{"message guard twice", []Option{WithMessageGuard(g), WithMessageGuard(g)}},
		{"client only: timeout", []Option{WithGuard(g), WithTimeout(time.Second)}},
		{"client only: target", []Option{WithGuard(g), WithTargetGuard("dns:///x", g)}},
		{"client only: max retry delay", []Option{WithGuard(g), WithMaxRetryDelay(time.Minute)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := UnaryServerInterceptor(tc.opts...)
			assert.Error(t, err)
			_, err = StreamServerInterceptor(tc.opts...)
			assert.Error(t, err)
		})
	}
	for _, opts := range [][]Option{
		nil,
		{WithGuard(g), WithQuotaMetadata()},
		{WithGuard(g), WithMessageGuard(g)},
		{WithGuard(g), WithTimeout(0)},
		{WithGuard(g), WithTimeout(time.Second), WithTimeout(time.Minute)},
		{WithGuard(g), WithTargetGuard("", g)},
		{WithGuard(g), WithTargetGuard("dns:///x", nil)},
		{WithTargetGuard("dns:///x", g), WithTargetGuard("dns:///x", g)},
		{WithGuard(g), WithMaxRetryDelay(-time.Second)},
		{WithGuard(g), WithMaxRetryDelay(time.Second), WithMaxRetryDelay(0)},
		{WithMethodGuard(methodWatch, g), WithCriticalMethods(methodCheck)},
	} {
		_, err := UnaryClientInterceptor(opts...)
		assert.Error(t, err)
		_, err = StreamClientInterceptor(opts...)
		assert.Error(t, err)
	}
	_, err = ServerInHandle()
	assert.Error(t, err, "a tap with no Guard")

	// A message guard alone guards a stream interceptor, not a unary one;
	// a target Guard may guard any method, so a critical one is no error.
	_, err = StreamServerInterceptor(WithMessageGuard(g))
	assert.NoError(t, err)
	_, err = UnaryServerInterceptor(WithMessageGuard(g))
	assert.Error(t, err)
	_, err = UnaryClientInterceptor(WithTargetGuard("dns:///x", g), WithCriticalMethods(methodCheck))
	assert.NoError(t, err)
	_, err = UnaryServerInterceptor(WithRoutes(table), WithCriticalMethods(methodCheck))
	assert.NoError(t, err)
}

func TestQuotaMetadataOnAdmittedCalls(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		clk := sluice.NewManualClock(0)
		g := mustGuard(t, sluice.WithClock(clk), sluice.With(fixedWindow(t, "ratelimit/q", 5, time.Minute, clk)))
		s := start(t, tr, serverOpts(t, WithGuard(g), WithQuotaMetadata()))
		clk.Advance(15 * time.Second)
		var hdr metadata.MD
		require.NoError(t, s.check(withTimeout(t), grpc.Header(&hdr)))
		p, l, ok := quota(t, hdr)
		require.True(t, ok)
		q, _ := p.Int("q")
		w, _ := p.Int("w")
		r, _ := l.Int("r")
		tt, _ := l.Int("t")
		assert.Equal(t, []int64{5, 60, 4, 45}, []int64{q, w, r, tt})
	})
}

// An admitted call allocates nothing; a client call whose Guard reads its
// resource, only the context that carries it.
func TestAdmittedCallAllocatesNothing(t *testing.T) {
	clk := sluice.NewManualClock(0)
	lim := fixedWindow(t, "ratelimit/hot", 1<<30, time.Hour, clk)
	b := newBreaker(t, "hot", clk, breaker.WithConsecutiveFailures(5))
	g := mustGuard(t, sluice.WithClock(clk), sluice.With(lim, b))
	ctx := context.Background()
	ok := func(context.Context, any) (any, error) { return nil, nil }

	i := unary(t, WithGuard(g))
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = i(ctx, nil, info, ok) }), "unary server")

	i = unary(t, WithGuard(g), WithMethodGuard(methodWatch, g))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = i(ctx, nil, info, ok) }), "unary server with a method table")

	c, err := UnaryClientInterceptor(WithGuard(g))
	require.NoError(t, err)
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = c(ctx, methodCheck, nil, nil, nil, invoke) }), "unary client")

	// A Guard that reads the call's resource (a breaker.Group keyed by
	// method) costs the client call the context that names it.
	group, err := breaker.NewGroup("methods", breaker.WithClock(clk))
	require.NoError(t, err)
	c, err = UnaryClientInterceptor(WithGuard(mustGuard(t, sluice.WithClock(clk), sluice.With(lim, group))))
	require.NoError(t, err)
	var seen string
	named := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		seen, _ = sluice.ResourceFrom(ctx)
		return nil
	}
	assert.Equal(t, 1.0, testing.AllocsPerRun(1000, func() { _ = c(ctx, methodCheck, nil, nil, nil, named) }), "unary client, a Group")
	assert.Equal(t, methodCheck, seen)
}

func TestRetryInfoEncoding(t *testing.T) {
	for _, d := range []time.Duration{time.Nanosecond, 999 * time.Millisecond, time.Second, 2500 * time.Millisecond,
		time.Hour + 7*time.Nanosecond, 10 * 365 * 24 * time.Hour} {
		m, err := retryInfo(d).UnmarshalNew()
		require.NoError(t, err, d)
		ri, ok := m.(*errdetails.RetryInfo)
		require.True(t, ok)
		assert.Equal(t, d, ri.GetRetryDelay().AsDuration())
	}
}

func TestRejectionStatusWithAnInvalidPolicyName(t *testing.T) {
	st := statusOf(sluice.Decision{Policy: "bad\xffname", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen})
	d, ok := RejectionOf(st.Err())
	require.True(t, ok)
	assert.Equal(t, "bad\uFFFDname", d.Policy)
	assert.Equal(t, time.Second, d.RetryAfter)
}

// A peer's RetryInfo with a negative delay announces no delay: RejectionOf
// never returns a negative RetryAfter.
func TestRejectionOfNegativeRetryDelayIsNone(t *testing.T) {
	info, err := anypb.New(&errdetails.ErrorInfo{Domain: errorDomain, Reason: reasonRateLimited})
	require.NoError(t, err)
	for _, delay := range []*durationpb.Duration{{Seconds: -30}, {Nanos: -1}, {Seconds: math.MinInt64}} {
		retry, err := anypb.New(&errdetails.RetryInfo{RetryDelay: delay})
		require.NoError(t, err)
		st := status.FromProto(&spb.Status{Code: int32(codes.ResourceExhausted), Details: []*anypb.Any{info, retry}})
		d, ok := RejectionOf(st.Err())
		require.True(t, ok)
		assert.Zero(t, d.RetryAfter, delay.String())
		assert.ErrorIs(t, d.Cause, sluice.ErrRateLimited)
	}
}

// A Guard's timeout is a failure even when the call answered its deadline
// with context.Canceled, or ran out while an inner Guard made it wait and
// then rejected it: Classify counts a *timeouterr.Error as the Guard's
// own classifier does, before the cancellation and the rejection it wraps.
func TestClassifyTimeoutsAsTheGuardDoes(t *testing.T) {
	inner := sluice.Rejection(sluice.Decision{Policy: "adaptive/q", Limit: -1, Cause: sluice.ErrConcurrencyLimited})
	for _, tc := range []struct {
		name string
		err  error
		want sluice.Outcome
	}{
		{"timeout answered with Canceled", &timeouterr.Error{After: time.Second, Err: context.Canceled}, sluice.Failure},
		{"timeout wrapping an inner rejection", &timeouterr.Error{After: time.Second, Err: inner}, sluice.Failure},
		{"wrapped timeout", fmt.Errorf("query: %w", &timeouterr.Error{After: time.Second, Err: context.Canceled}), sluice.Failure},
		{"a policy's rejection with ErrTimeout", sluice.Rejection(sluice.Decision{Policy: "p", Limit: -1, Cause: sluice.ErrTimeout}), sluice.Ignored},
		{"own rejection with ErrTimeout", newRejection(nil, sluice.Decision{Policy: "p", Limit: -1, Cause: sluice.ErrTimeout}), sluice.Ignored},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Classify(tc.err))
			assert.Equal(t, sluice.DefaultClassifier(tc.err), Classify(tc.err), "the Guard's own classifier disagrees")
		})
	}

	// A handler whose own Guard timed out a call that answered with
	// context.Canceled: gRPC sends DeadlineExceeded, and the interceptor's
	// Guard counts a failure.
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{name: "rec"}
		i := unary(t, WithGuard(mustGuard(t, sluice.With(rec))))
		own := mustGuard(t, sluice.WithTimeout(100*time.Millisecond))
		handler := func(ctx context.Context, _ any) (any, error) {
			return nil, own.Do(ctx, func(ctx context.Context) error {
				<-ctx.Done()
				return context.Canceled // as some drivers answer a deadline
			})
		}
		_, err := i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, handler)
		require.ErrorIs(t, err, sluice.ErrTimeout)
		assert.Equal(t, []sluice.Outcome{sluice.Failure}, rec.Outcomes())
	})
}

// Error sends a rejection as RejectionStatus whatever wraps it, and leaves
// alone a Guard's timeout wrapping an inner rejection: that is a timeout,
// not a rejection.
func TestErrorOfWrappedRejectionsAndTimeouts(t *testing.T) {
	re := sluice.Rejection(sluice.Decision{Policy: "ratelimit/a", Limit: 10, RetryAfter: 3 * time.Second, Cause: sluice.ErrRateLimited})
	own := rejectionError(re)
	err := rejectionError(fmt.Errorf("fetch account 42 from db-7: %w", own))
	assert.Equal(t, "sluice: rate limited; retry after 3s", status.Convert(err).Message(), "the service's error text went on the wire")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.ErrorIs(t, err, sluice.ErrRateLimited)

	te := &timeouterr.Error{After: time.Second, Err: sluice.Rejection(sluice.Decision{Policy: "adaptive/q", Limit: -1, Cause: sluice.ErrConcurrencyLimited})}
	assert.Same(t, te, rejectionError(te), "a timeout was turned into a rejection")
	_, ok := RejectionOf(rejectionError(te))
	assert.False(t, ok)
	assert.Equal(t, codes.DeadlineExceeded, status.FromContextError(rejectionError(te)).Code(), "as gRPC sends a handler's error without a status")
}

// A handler that returns a rejection its own call met (its dependency's
// breaker open, wrapped in its own words) gets it answered as the
// interceptor's own: the fallback of the method's Guard, else the
// rejection's status with RetryInfo and not the handler's text; the call
// counts Ignored.
func TestHandlerReturningARejectionIsAnsweredAsOne(t *testing.T) {
	d := sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: 3 * time.Second, Cause: sluice.ErrCircuitOpen}
	handler := func(context.Context, any) (any, error) {
		return nil, fmt.Errorf("fetch account 42 from db-7: %w", sluice.Rejection(d))
	}
	rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 2)}
	i := unary(t, WithGuard(mustGuard(t, sluice.With(rec))),
		WithMethodGuard("/svc/Fallback", mustGuard(t, sluice.With(rec), sluice.WithFallback(openFallback(t)))))
	_, err := i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, handler)
	st := status.Convert(err)
	assert.Equal(t, codes.Unavailable, st.Code())
	assert.NotContains(t, st.Message(), "db-7")
	got, ok := RejectionOf(err)
	require.True(t, ok)
	assert.Equal(t, 3*time.Second, got.RetryAfter)
	assert.Equal(t, sluice.Ignored, rec.next(t))

	resp, err := i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/svc/Fallback"}, handler)
	require.NoError(t, err)
	assert.Equal(t, "fallback for breaker/dep", resp)
	assert.Equal(t, sluice.Ignored, rec.next(t))
}

// A call the interceptor lets through unguarded (a method without a
// Guard, a skipped call) still gets a rejection its handler returns
// answered as one, as a stream's is: the rejection's status and not the
// handler's text. (With no Guard, no fallback.)
func TestUnguardedHandlerReturningARejection(t *testing.T) {
	d := sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: 2 * time.Second, Cause: sluice.ErrCircuitOpen}
	handler := func(context.Context, any) (any, error) {
		return nil, fmt.Errorf("fetch account 42 from db-7: %w", sluice.Rejection(d))
	}
	rec := &recorder{name: "rec"}
	i := unary(t, WithMethodGuard(methodWatch, mustGuard(t, sluice.With(rec))),
		WithSkipper(middleware.SkipRoutes(methodWatch)))
	for _, method := range []string{methodCheck, methodWatch} {
		_, err := i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method}, handler)
		st := status.Convert(err)
		assert.Equal(t, codes.Unavailable, st.Code(), method)
		assert.NotContains(t, st.Message(), "db-7", method)
		got, ok := RejectionOf(err)
		require.True(t, ok, method)
		assert.Equal(t, 2*time.Second, got.RetryAfter, method)
	}
	assert.Empty(t, rec.Outcomes())
}

// A stream handler's rejection goes out the same way: its status, not its
// text.
func TestStreamHandlerReturningARejection(t *testing.T) {
	d := sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: 2 * time.Second, Cause: sluice.ErrCircuitOpen}
	rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 1)}
	s := stream(t, WithGuard(mustGuard(t, sluice.With(rec))))
	err := s(nil, fakeStream{ctx: context.Background()}, &grpc.StreamServerInfo{FullMethod: methodChat}, func(any, grpc.ServerStream) error {
		return fmt.Errorf("watch db-7: %w", sluice.Rejection(d))
	})
	st := status.Convert(err)
	assert.Equal(t, codes.Unavailable, st.Code())
	assert.NotContains(t, st.Message(), "db-7")
	assert.Equal(t, sluice.Ignored, rec.next(t))
}

// A handler that returns what its client interceptor answered for a
// dependency whose breaker is open (an interceptor's own rejection) gets
// the fallback of the method's Guard, as a bare rejection does.
func TestHandlerReturningAClientRejectionGetsTheFallback(t *testing.T) {
	clk := sluice.NewManualClock(0)
	b := newBreaker(t, "dep", clk)
	b.ForceOpen()
	client, err := UnaryClientInterceptor(WithGuard(mustGuard(t, sluice.WithClock(clk), sluice.With(b))))
	require.NoError(t, err)
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	handler := func(ctx context.Context, _ any) (any, error) {
		return nil, client(ctx, "/dep.Dep/Get", nil, nil, nil, invoke)
	}
	rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 2)}
	i := unary(t, WithGuard(mustGuard(t, sluice.With(rec), sluice.WithFallback(openFallback(t)))))
	resp, err := i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, handler)
	require.NoError(t, err)
	assert.Equal(t, "fallback for breaker/dep", resp)
	assert.Equal(t, sluice.Ignored, rec.next(t))

	resp, err = i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck},
		func(context.Context, any) (any, error) {
			return nil, rejectionError(sluice.Rejection(sluice.Decision{Policy: "own", Limit: -1, Cause: sluice.ErrCircuitOpen}))
		})
	require.NoError(t, err)
	assert.Equal(t, "fallback for own", resp)
	assert.Equal(t, sluice.Ignored, rec.next(t))
}

// On a call a ServerInHandle admitted, a handler's rejection answered by
// the fallback of the method's Guard counts Ignored for the tap's Guard, as
// on a call the interceptor admitted.
func TestTappedHandlerRejectionAnsweredByAFallbackIsIgnored(t *testing.T) {
	rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 2)}
	g := mustGuard(t, sluice.With(rec))
	handle, err := ServerInHandle(WithGuard(g))
	require.NoError(t, err)
	i := unary(t, WithGuard(mustGuard(t, sluice.WithFallback(openFallback(t)))))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx, err = handle(ctx, &tap.Info{FullMethodName: methodCheck, Header: metadata.MD{}})
	require.NoError(t, err)
	resp, err := i(ctx, nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, func(context.Context, any) (any, error) {
		return nil, sluice.Rejection(sluice.Decision{Policy: "breaker/dep", Limit: -1, Cause: sluice.ErrCircuitOpen})
	})
	require.NoError(t, err)
	assert.Equal(t, "fallback for breaker/dep", resp)
	assert.Equal(t, sluice.Ignored, rec.next(t))
}

func TestClassifyCode(t *testing.T) {
	for code, want := range map[codes.Code]sluice.Outcome{
		codes.OK: sluice.Success, codes.Canceled: sluice.Ignored, codes.Unknown: sluice.Failure,
		codes.InvalidArgument: sluice.Ignored, codes.DeadlineExceeded: sluice.Failure, codes.NotFound: sluice.Ignored,
		codes.PermissionDenied: sluice.Ignored, codes.ResourceExhausted: sluice.Ignored, codes.Unimplemented: sluice.Ignored,
		codes.Internal: sluice.Failure, codes.Unavailable: sluice.Failure, codes.DataLoss: sluice.Failure,
		codes.Unauthenticated: sluice.Ignored,
	} {
		assert.Equal(t, want, classifyCode(code), code.String())
	}
}

// A classifier (WithClassifier) that panics ends the call first: the
// bulkhead's only slot is given back, on a server and on a client.
func TestAClassifierThatPanicsEndsTheCall(t *testing.T) {
	panicky := WithClassifier(func(err error) sluice.Outcome {
		if status.Code(err) == codes.Aborted {
			panic("classifier bug")
		}
		return sluice.Failure
	})
	aborted := status.Error(codes.Aborted, "aborted")
	bh, err := adaptive.NewBulkhead(1)
	require.NoError(t, err)
	i := unary(t, WithGuard(mustGuard(t, sluice.With(bh))), panicky)
	info := &grpc.UnaryServerInfo{FullMethod: "/svc/M"}
	func() {
		defer func() { _ = recover() }()
		_, _ = i(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, aborted })
	}()
	_, err = i(context.Background(), nil, info, func(context.Context, any) (any, error) { return "ok", nil })
	assert.NoError(t, err, "the server's bulkhead slot leaked")

	cbh, err := adaptive.NewBulkhead(1)
	require.NoError(t, err)
	ci, err := UnaryClientInterceptor(WithGuard(mustGuard(t, sluice.With(cbh))), panicky)
	require.NoError(t, err)
	func() {
		defer func() { _ = recover() }()
		_ = ci(context.Background(), "/svc/M", nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return aborted })
	}()
	err = ci(context.Background(), "/svc/M", nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil })
	assert.NoError(t, err, "the client's bulkhead slot leaked")
}

// Past the Guard's deadline, what is its timeout, as a Guard's Do has it:
// a failure, a rejection (an inner Guard's wait the deadline cut), a
// context's end; not a NotFound.
func TestWhatPastTheDeadlineIsTheTimeout(t *testing.T) {
	inner := sluice.Rejection(sluice.Decision{Policy: "adaptive/q", Limit: -1, Cause: sluice.ErrConcurrencyLimited})
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, "down"), true},
		{inner, true},
		{context.Canceled, true},
		{status.Error(codes.Canceled, "gone"), true},
		{status.Error(codes.NotFound, "no such user"), false},
		{status.Error(codes.InvalidArgument, "bad"), false},
	} {
		assert.Equal(t, tc.want, timeoutOf(Classify(tc.err), tc.err), "%v", tc.err)
	}
}
