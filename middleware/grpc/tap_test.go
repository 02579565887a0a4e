package sluicegrpc

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

func tapHandle(t *testing.T, opts ...Option) grpc.ServerOption {
	t.Helper()
	h, err := ServerInHandle(opts...)
	require.NoError(t, err)
	return grpc.InTapHandle(h)
}

func TestTapRejectsBeforeTheHandler(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		for _, call := range calls {
			t.Run(call.name, func(t *testing.T) {
				clk := sluice.NewManualClock(0)
				rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 4)}
				g := mustGuard(t, sluice.WithClock(clk), sluice.With(fixedWindow(t, "ratelimit/tap", 1, 5*time.Second, clk), rec))
				sopts := append([]grpc.ServerOption{tapHandle(t, WithGuard(g))}, serverOpts(t, WithGuard(g))...)
				s := start(t, tr, sopts)
				ctx := withTimeout(t)

				require.NoError(t, call.do(ctx, s))
				assert.Equal(t, sluice.Success, rec.next(t), "the interceptor ends the tap's admission")

				err := call.do(ctx, s)
				got := readWire(t, err)
				assert.Equal(t, codes.ResourceExhausted, got.code)
				assert.Equal(t, reasonRateLimited, got.reason)
				assert.Equal(t, "ratelimit/tap", got.policy)
				assert.Equal(t, 5*time.Second, got.delay)
				assert.Equal(t, int64(1), s.health.calls.Load())

				clk.Advance(5 * time.Second)
				err = call.do(withCode(ctx, codes.Internal), s)
				assert.Equal(t, codes.Internal, status.Code(err))
				assert.Equal(t, sluice.Failure, rec.next(t))
				assert.Equal(t, []sluice.Outcome{sluice.Success, sluice.Failure}, rec.Outcomes(),
					"the interceptor asked the tap's Guard again")
			})
		}
	})
}

func TestTapAndInterceptorWithTheirOwnGuards(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		outer := &recorder{name: "tap", ended: make(chan sluice.Outcome, 4)}
		inner := &refuser{name: "breaker/inner", cause: sluice.ErrCircuitOpen, retry: time.Second}
		tapGuard := mustGuard(t, sluice.With(outer))
		s := start(t, tr, append([]grpc.ServerOption{tapHandle(t, WithGuard(tapGuard))},
			serverOpts(t, WithGuard(mustGuard(t, sluice.With(inner))))...))
		ctx := withTimeout(t)
		for _, call := range calls {
			inner.off.Store(false)
			got := readWire(t, call.do(ctx, s))
			assert.Equal(t, reasonCircuitOpen, got.reason, call.name)
			assert.Equal(t, sluice.Released, outer.next(t), "%s: an inner rejection releases the tap's admission", call.name)

			inner.off.Store(true)
			require.NoError(t, call.do(ctx, s), call.name)
			assert.Equal(t, sluice.Success, outer.next(t), call.name)
		}
	})
}

func TestTapAloneEndsItsAdmissionWithTheCall(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 4)}
		s := start(t, tr, []grpc.ServerOption{tapHandle(t, WithGuard(mustGuard(t, sluice.With(rec))))})
		ctx := withTimeout(t)
		require.NoError(t, s.check(ctx))
		assert.Equal(t, sluice.Ignored, rec.next(t), "without an interceptor the outcome is unknown")
		_, err := s.chat(ctx, 3)
		require.NoError(t, err)
		assert.Equal(t, sluice.Ignored, rec.next(t))
	})
}

// WithQuotaMetadata on the interceptors sends the quota of the calls a
// ServerInHandle with the same Guard admitted: the tap's decision, the only
// one taken for them.
func TestQuotaMetadataOnCallsTheTapAdmitted(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		for _, call := range calls {
			if call.method == methodChat {
				continue // its call takes no options
			}
			t.Run(call.name, func(t *testing.T) {
				clk := sluice.NewManualClock(0)
				g := mustGuard(t, sluice.WithClock(clk), sluice.With(fixedWindow(t, "ratelimit/q", 5, 10*time.Second, clk)))
				s := start(t, tr, append([]grpc.ServerOption{tapHandle(t, WithGuard(g))}, serverOpts(t, WithGuard(g), WithQuotaMetadata())...))
				clk.Advance(4 * time.Second)
				var hdr metadata.MD
				require.NoError(t, call.do(withTimeout(t), s, grpc.Header(&hdr)))
				p, l, ok := quota(t, hdr)
				require.True(t, ok, "no quota metadata")
				q, _ := p.Int("q")
				r, _ := l.Int("r")
				reset, _ := l.Int("t")
				assert.Equal(t, []int64{5, 4, 6}, []int64{q, r, reset}, "one admission, the tap's")
			})
		}
	})
}

// A call whose client left between the tap and the interceptors (the tap's
// admission already ended as Ignored) is answered with its context's status,
// without running the handler or asking the tap's Guard a second time.
func TestTappedCallWhoseClientLeftIsNotAdmittedAgain(t *testing.T) {
	rec := &recorder{name: "rec", ended: make(chan sluice.Outcome, 4)}
	g := mustGuard(t, sluice.With(rec))
	handle, err := ServerInHandle(WithGuard(g))
	require.NoError(t, err)
	left := func(method string) context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		tctx, err := handle(ctx, &tap.Info{FullMethodName: method})
		require.NoError(t, err)
		cancel()
		assert.Equal(t, sluice.Ignored, rec.next(t), "the tap's admission ends with the call's context")
		return tctx
	}
	ran := false
	_, err = unary(t, WithGuard(g))(left(methodCheck), nil, &grpc.UnaryServerInfo{FullMethod: methodCheck},
		func(context.Context, any) (any, error) { ran = true; return "ok", nil })
	assert.Equal(t, codes.Canceled, status.Code(err), "unary")
	err = stream(t, WithGuard(g))(nil, fakeStream{ctx: left(methodChat)}, &grpc.StreamServerInfo{FullMethod: methodChat},
		func(any, grpc.ServerStream) error { ran = true; return nil })
	assert.Equal(t, codes.Canceled, status.Code(err), "stream")
	assert.False(t, ran, "a handler ran for a client that had left")
	assert.Len(t, rec.Keys(), 2, "a call was admitted twice")
	assert.Len(t, rec.Outcomes(), 2)
}

func TestTapKeysFromHeaderMetadata(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		rec := &recorder{name: "rec"}
		s := start(t, tr, []grpc.ServerOption{tapHandle(t, WithGuard(mustGuard(t, sluice.With(rec))), withKey(t, middleware.MissingKey{}, middleware.KeyByHeader("X-Api-Key")))})
		ctx := withTimeout(t)
		require.NoError(t, s.check(metadata.AppendToOutgoingContext(ctx, "x-api-key", "tenant-7")))
		require.NoError(t, s.check(ctx))
		assert.Equal(t, []string{"tenant-7", "unknown"}, rec.Keys())
	})
}

func TestTapRefusesOptionsItCannotHonour(t *testing.T) {
	g := mustGuard(t)
	for _, o := range []Option{WithQuotaMetadata(), WithMessageGuard(g), WithTimeout(time.Second), WithTargetGuard("x", g)} {
		_, err := ServerInHandle(WithGuard(g), o)
		assert.Error(t, err)
	}
}

// A tap's Guard's call timeout (sluice.WithTimeout) bounds the unary calls it
// admitted, as the interceptor's own timeout bounds the calls it admits:
// whether the interceptor's route has the tap's Guard or another one, the
// handler's context ends at the deadline, the call ends DeadlineExceeded and
// the tap's Guard counts it as a failure. Streams keep running: the timeout
// is for calls, not for a stream's life.
func TestTapGuardTimeoutBoundsTappedCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{name: "rec"}
		g := mustGuard(t, sluice.With(rec), sluice.WithTimeout(200*time.Millisecond))
		handle, err := ServerInHandle(WithGuard(g))
		require.NoError(t, err)
		tapped := func() context.Context {
			ctx, err := handle(t.Context(), &tap.Info{FullMethodName: methodCheck})
			require.NoError(t, err)
			return ctx
		}
		var waited time.Duration
		slow := func(ctx context.Context, _ any) (any, error) {
			start := time.Now()
			select {
			case <-ctx.Done():
				waited = time.Since(start)
				return nil, status.FromContextError(ctx.Err()).Err()
			case <-time.After(time.Hour):
				waited = time.Hour
				return "done", nil
			}
		}
		info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
		for _, tc := range []struct {
			name string
			opt  Option
		}{
			{"same Guard", WithGuard(g)},
			{"own Guard without a timeout", WithGuard(mustGuard(t))},
		} {
			waited = 0
			_, err = unary(t, tc.opt)(tapped(), nil, info, slow)
			assert.Equal(t, codes.DeadlineExceeded, status.Code(err), tc.name)
			assert.Contains(t, status.Convert(err).Message(), "sluice: timeout", tc.name)
			assert.Equal(t, 200*time.Millisecond, waited, tc.name)
		}
		assert.Equal(t, []sluice.Outcome{sluice.Failure, sluice.Failure}, rec.Outcomes())

		ctx, err := handle(t.Context(), &tap.Info{FullMethodName: methodWatch})
		require.NoError(t, err)
		err = stream(t, WithGuard(g))(nil, fakeStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: methodWatch}, func(_ any, ss grpc.ServerStream) error {
			select {
			case <-ss.Context().Done():
				return ss.Context().Err()
			case <-time.After(time.Hour):
				return nil
			}
		})
		assert.NoError(t, err, "a stream outlives the Guard's call timeout")
	})
}

// A ServerInHandle has no use for WithClassifier (the interceptors classify
// the calls it admits): it is refused, as the tap's other options without
// meaning are, not silently ignored.
func TestTapRefusesAClassifier(t *testing.T) {
	g := mustGuard(t)
	_, err := ServerInHandle(WithGuard(g), WithClassifier(Classify))
	assert.ErrorContains(t, err, "sluicegrpc: WithClassifier has no meaning for a ServerInHandle")
}
