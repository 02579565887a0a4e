package sluicegrpc

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func ipExtractor(t *testing.T, opts ...middleware.IPOption) *middleware.IPExtractor {
	t.Helper()
	e, err := middleware.NewIPExtractor(opts...)
	require.NoError(t, err)
	return e
}

func TestKeyByPeerHonoursForwardedForOnlyFromTrustedPeers(t *testing.T) {
	tcp := transports[1]
	tests := []struct {
		name    string
		trusted []string
		xff     []string
		want    string
	}{
		{name: "no header", want: "127.0.0.1"},
		{name: "spoofed header from an untrusted peer", xff: []string{"203.0.113.9"}, want: "127.0.0.1"},
		{name: "trusted peer", trusted: []string{"127.0.0.1"}, xff: []string{"203.0.113.9"}, want: "203.0.113.9"},
		{name: "right-most untrusted hop", trusted: []string{"127.0.0.0/8", "10.0.0.0/8"},
			xff: []string{"198.51.100.7, 203.0.113.9, 10.0.0.5"}, want: "203.0.113.9"},
		{name: "only trusted hops", trusted: []string{"127.0.0.1", "10.0.0.0/8"}, xff: []string{"10.1.2.3"}, want: "10.1.2.3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{name: "rec"}
			e := ipExtractor(t, middleware.TrustedProxies(tc.trusted...))
			g := mustGuard(t, sluice.With(rec))
			sopts := append([]grpc.ServerOption{tapHandle(t, WithGuard(g), withKey(t, middleware.MissingKey{}, middleware.KeyByIP(e)))},
				serverOpts(t, WithGuard(mustGuard(t, sluice.With(rec))), withKey(t, middleware.MissingKey{}, middleware.KeyByIP(e)))...)
			s := start(t, tcp, sopts)
			ctx := withTimeout(t)
			for _, v := range tc.xff {
				ctx = metadata.AppendToOutgoingContext(ctx, "x-forwarded-for", v)
			}
			require.NoError(t, s.check(ctx))
			_, err := s.chat(ctx, 1)
			require.NoError(t, err)
			// The tap and the interceptor each asked their own Guard.
			assert.Equal(t, []string{tc.want, tc.want, tc.want, tc.want}, rec.Keys())
		})
	}
}

type userKey struct{}

func TestKeyFunctions(t *testing.T) {
	// setUser stands for an authentication interceptor that runs first.
	setUser := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if v := metadata.ValueFromIncomingContext(ctx, "x-user"); len(v) > 0 {
			ctx = context.WithValue(ctx, userKey{}, v[0])
		}
		return h(ctx, req)
	}
	user := middleware.KeyByContext(func(ctx context.Context) (string, bool) {
		u, ok := ctx.Value(userKey{}).(string)
		return u, ok
	})
	forEachTransport(t, func(t *testing.T, tr transport) {
		tests := []struct {
			name    string
			opts    []Option
			md      []string
			want    string
			wantErr codes.Code
		}{
			{name: "metadata", opts: []Option{withKey(t, middleware.MissingKey{}, middleware.KeyByHeader("x-api-key"))}, md: []string{"x-api-key", "k1"}, want: "k1"},
			{name: "context value", opts: []Option{withKey(t, middleware.MissingKey{}, user)}, md: []string{"x-user", "ada"}, want: "ada"},
			{name: "method", opts: []Option{withKey(t, middleware.MissingKey{}, middleware.KeyByRoute())}, want: methodCheck},
			{name: "first that finds one", opts: []Option{withKey(t, middleware.MissingKey{}, middleware.KeyByHeader("x-api-key"), user)}, md: []string{"x-user", "bob"}, want: "1:bob"},
			{name: "missing: shared key", opts: []Option{withKey(t, middleware.SharedKey("anonymous"), middleware.KeyByHeader("x-api-key"))}, want: "anonymous"},
			{name: "missing: default shared key", opts: []Option{withKey(t, middleware.MissingKey{}, middleware.KeyByHeader("x-api-key"))}, want: "unknown"},
			{name: "missing: rejected", opts: []Option{withKey(t, middleware.RejectMissingKey(), middleware.KeyByHeader("x-api-key"))}, wantErr: codes.InvalidArgument},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				rec := &recorder{name: "rec"}
				i := unary(t, append([]Option{WithGuard(mustGuard(t, sluice.With(rec)))}, tc.opts...)...)
				s := start(t, tr, []grpc.ServerOption{grpc.ChainUnaryInterceptor(setUser, i)})
				ctx := withTimeout(t)
				if len(tc.md) > 0 {
					ctx = metadata.AppendToOutgoingContext(ctx, tc.md...)
				}
				err := s.check(ctx)
				if tc.wantErr != codes.OK {
					assert.Equal(t, tc.wantErr, status.Code(err))
					assert.Empty(t, rec.Keys())
					assert.Zero(t, s.health.calls.Load())
					return
				}
				require.NoError(t, err)
				assert.Equal(t, []string{tc.want}, rec.Keys())
			})
		}
	})
}

func TestSkipperBypassesTheGuard(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		shut := &refuser{name: "adaptive/cpu", cause: sluice.ErrOverloaded}
		g := mustGuard(t, sluice.With(shut))
		skip := WithSkipper(middleware.SkipRoutes(methodCheck))
		s := start(t, tr, append([]grpc.ServerOption{tapHandle(t, WithGuard(g), skip)}, serverOpts(t, WithGuard(g), skip)...))
		ctx := withTimeout(t)
		require.NoError(t, s.check(ctx))
		_, err := s.watch(ctx)
		assert.Equal(t, codes.Unavailable, status.Code(err))
	})
}

func TestCriticalMethodsCarryTheirPriority(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		rec := &recorder{name: "rec"}
		g := mustGuard(t, sluice.With(rec))
		crit := WithCriticalMethods(methodCheck)
		s := start(t, tr, append([]grpc.ServerOption{tapHandle(t, WithGuard(g), crit)}, serverOpts(t, WithGuard(g), crit)...),
			clientOpts(t, WithGuard(g), crit)...)
		ctx := withTimeout(t)
		require.NoError(t, s.check(ctx))
		_, err := s.watch(ctx)
		require.NoError(t, err)
		// The client's, then the tap's (the interceptor shares its Guard).
		c, n := sluice.PriorityCritical, sluice.PriorityNormal
		assert.Equal(t, []sluice.Priority{c, c, n, n}, rec.Priorities())
	})
}

// A keyed call carries its method as its resource, as a keyed HTTP request
// carries its route (middleware.Keyer's Context): a breaker.Group under one
// Guard keeps a breaker per method, so one failing method does not open the
// circuit of the others. WithMethodResource does it without a key.
func TestKeyedCallsAndMethodResourceGiveEachMethodItsBreaker(t *testing.T) {
	keyer, err := middleware.NewKeyer(middleware.SharedKey("all"), middleware.KeyByHeader("x-api-key"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		opt  Option
	}{
		{"WithKeyer", WithKeyer(keyer)},
		{"WithMethodResource", WithMethodResource()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group, err := breaker.NewGroup("methods", breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(time.Minute))
			require.NoError(t, err)
			intercept := unary(t, WithGuard(mustGuard(t, sluice.With(group))), tc.opt)
			var resource string
			call := func(method string, fail bool) error {
				_, err := intercept(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method},
					func(ctx context.Context, _ any) (any, error) {
						resource, _ = sluice.ResourceFrom(ctx)
						if fail {
							return nil, status.Error(codes.Unavailable, "down")
						}
						return "ok", nil
					})
				return err
			}
			for range 2 {
				assert.Equal(t, codes.Unavailable, status.Code(call(methodCheck, true)))
			}
			assert.Equal(t, methodCheck, resource, "the method is the call's resource")
			_, open := RejectionOf(call(methodCheck, false))
			assert.True(t, open, "the failing method's circuit is open")
			assert.NoError(t, call(methodWatch, false), "another method has its own breaker")
			for _, m := range []string{methodCheck, methodWatch} {
				_, ok := group.Get(m)
				assert.True(t, ok, "a breaker of its own for %s", m)
			}
		})
	}
}

// Every constructor puts the method in the call's context as its resource
// with WithMethodResource: the tap, the server interceptors and the client
// interceptors, unary and streaming. A skipped call gets none.
func TestMethodResourceInEveryConstructor(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		rec := &recorder{name: "rec"}
		g := mustGuard(t, sluice.With(rec))
		res := WithMethodResource()
		s := start(t, tr, append([]grpc.ServerOption{tapHandle(t, WithGuard(g), res)}, serverOpts(t, WithGuard(g), res)...),
			clientOpts(t, WithGuard(g), res)...)
		ctx := withTimeout(t)
		require.NoError(t, s.check(ctx))
		_, err := s.watch(ctx)
		require.NoError(t, err)
		_, err = s.chat(ctx, 1)
		require.NoError(t, err)
		// The client's, then the tap's (the interceptor shares its Guard).
		assert.Equal(t, []string{methodCheck, methodCheck, methodWatch, methodWatch, methodChat, methodChat}, rec.Resources())

		skipped := &recorder{name: "skipped"}
		i := unary(t, WithGuard(mustGuard(t, sluice.With(skipped))), res, WithSkipper(middleware.SkipRoutes(methodWatch)))
		var got []string
		for _, m := range []string{methodCheck, methodWatch} {
			_, err := i(ctx, nil, &grpc.UnaryServerInfo{FullMethod: m}, func(ctx context.Context, _ any) (any, error) {
				r, _ := sluice.ResourceFrom(ctx)
				got = append(got, r)
				return "ok", nil
			})
			require.NoError(t, err)
		}
		assert.Equal(t, []string{methodCheck, ""}, got)
		assert.Equal(t, []string{methodCheck}, skipped.Resources())
	})
}

// withKey keys calls with a Keyer of fns, which does with a call none of
// them keys what missing says.
func withKey(t testing.TB, missing middleware.MissingKey, fns ...middleware.KeyFunc) Option {
	t.Helper()
	k, err := middleware.NewKeyer(missing, fns...)
	require.NoError(t, err)
	return WithKeyer(k)
}
