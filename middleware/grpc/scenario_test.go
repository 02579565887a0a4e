package sluicegrpc

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/routing"
	"github.com/sluice-go/sluice/middleware/internal/scenario"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// scenarioMethod maps the scenario's route names ("a", "POST a") to full
// methods: "/sluice.scenario.Service/A", ".../PostA". A gRPC method is one
// route whatever the HTTP method, so each HTTP method and route is a
// method of its own, and GET is none.
func scenarioMethod(name string) string {
	method, route := scenario.SplitRoute(name)
	if method == http.MethodGet {
		method = ""
	}
	name = strings.ToUpper(route[:1]) + route[1:]
	if method != "" {
		name = method[:1] + strings.ToLower(method[1:]) + name
	}
	return "/sluice.scenario.Service/" + name
}

// headerStream is the server transport stream of a call the interceptor is
// called with directly: it keeps the header and trailer metadata set on it,
// joined as gRPC's own stream joins them.
type headerStream struct {
	method  string
	header  metadata.MD
	trailer metadata.MD
}

func (s *headerStream) Method() string { return s.method }
func (s *headerStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *headerStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *headerStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// fromGRPC reads the Result of a call that ended with err and header
// metadata header, as a client reads it off the wire: a status with a
// sluice ErrorInfo is a rejection, whose code must be its cause's and whose
// RetryInfo gives the delay.
func fromGRPC(ran bool, err error, header metadata.MD) (scenario.Result, error) {
	res := scenario.Result{
		RateLimitPolicy: strings.Join(header.Get(MetadataRateLimitPolicy), ", "),
		RateLimit:       strings.Join(header.Get(MetadataRateLimit), ", "),
	}
	if err == nil {
		return res, nil
	}
	st := status.Convert(err)
	res.Leaked = strings.Contains(st.Message(), scenario.WrapperText)
	// The status alone, as the client gets it: no error of the server's.
	if d, ok := RejectionOf(st.Err()); ok {
		res.Cause = sluice.CauseOf(d.Cause)
		if want := codeOf(res.Cause); st.Code() != want {
			return res, fmt.Errorf("scenario: %s answered with %s, not %s", res.Cause, st.Code(), want)
		}
		if d.RetryAfter <= 0 {
			return res, fmt.Errorf("scenario: %s answered without a RetryInfo delay", res.Cause)
		}
		res.RetryAfter = routing.RetryAfterSeconds(d.RetryAfter)
	} else if st.Code() == codes.InvalidArgument && !ran {
		res.MissingKey = true
	}
	return res, nil
}

// TestScenarios runs the scenario table shared with the HTTP adapters
// through the unary server interceptor, called with each step's peer and
// metadata in its context and a transport stream that keeps its header and
// trailer metadata. The interceptor sends the RateLimit metadata on admitted calls
// too (WithQuotaMetadata), as the HTTP adapters send the fields. A handler
// returns a rejection its call met.
func TestScenarios(t *testing.T) {
	scenario.Run(t, func(t *testing.T, s scenario.Setup) func(scenario.Step) scenario.Result {
		var names []string // the route names the table lists
		rs, err := s.Routes(func(name string) string {
			names = append(names, name)
			return scenarioMethod(name)
		})
		require.NoError(t, err)
		for _, g := range routing.TableOf(rs).Guards() {
			t.Cleanup(func() { _ = g.Close() })
		}
		if len(s.Fallbacks) > 0 {
			rs = withGuardFallbacks(t, s, rs, names)
		}
		opts := []Option{WithRoutes(rs), WithQuotaMetadata()}
		if s.Keyer != nil {
			opts = append(opts, WithKeyer(s.Keyer))
		}
		if s.RouteResource {
			opts = append(opts, WithMethodResource())
		}
		if len(s.Skip) > 0 {
			var skip []string
			for _, n := range s.Skip {
				skip = append(skip, scenarioMethod(n))
			}
			opts = append(opts, WithSkipper(middleware.SkipRoutes(skip...)))
		}
		intercept := unary(t, opts...)
		handler := func(ctx context.Context, _ any) (any, error) {
			switch h, err := scenario.Act(ctx); h {
			case scenario.ClientError:
				return nil, status.Error(codes.InvalidArgument, "bad")
			case scenario.ServerError:
				return nil, status.Error(codes.Unavailable, "down")
			case scenario.ClientGone:
				return nil, status.Error(codes.Unavailable, "upstream call cancelled")
			case scenario.Rejected, scenario.RejectedWrapped:
				return nil, err
			}
			return "ok", nil
		}
		var serve func(scenario.Step) scenario.Result
		serve = func(st scenario.Step) scenario.Result {
			addr, err := net.ResolveTCPAddr("tcp", st.Peer)
			require.NoError(t, err)
			ctx, call := scenario.NewCall(context.Background(), st, serve)
			defer call.End()
			method := scenarioMethod(st.Method + " " + st.Route)
			stream := &headerStream{method: method}
			ctx = grpc.NewContextWithServerTransportStream(ctx, stream)
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: addr})
			md := metadata.MD{}
			for k, v := range st.Header {
				md.Append(k, v)
			}
			ctx = metadata.NewIncomingContext(ctx, md)
			resp, err := intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, handler)
			// A rejection's RateLimit fields are in the trailer: the
			// fields the client gets are those of both.
			res, err := fromGRPC(call.Ran(), err, metadata.Join(stream.header, stream.trailer))
			require.NoError(t, err)
			if answer, ok := resp.(string); ok {
				res.Fallback = scenario.FallbackOf(answer)
			}
			return call.Result(res)
		}
		return serve
	})
}

// withGuardFallbacks returns rs, whose routes are the route names, with
// each route's Guard declaring the scenario's fallbacks for it, each
// answering its FallbackAnswer as the reply: the scenario declares them per
// route and cause, and sluicegrpc answers with a route's Guard's
// fallbacks. Each new Guard runs the policies of the one it replaces.
func withGuardFallbacks(t *testing.T, s scenario.Setup, rs *middleware.Routes, names []string) *middleware.Routes {
	t.Helper()
	guard := func(g *sluice.Guard, route string) *sluice.Guard {
		var own, every []degrade.Rule[any]
		for _, f := range s.Fallbacks {
			if f.Route != "" && f.Route != route {
				continue
			}
			rule := causeRule(t, f.Cause, degrade.Value[any](scenario.FallbackAnswer(f)))
			if f.Route == "" {
				every = append(every, rule)
			} else {
				own = append(own, rule)
			}
		}
		opts := []sluice.Option{sluice.With(g.Policies()...), sluice.WithClock(s.Clock)}
		// A route's own fallback comes first, as the most specific.
		for _, rules := range [][]degrade.Rule[any]{own, every} {
			if len(rules) > 0 {
				fb, err := degrade.New(rules...)
				require.NoError(t, err)
				opts = append(opts, sluice.WithFallback(fb))
			}
		}
		return mustGuard(t, opts...)
	}
	var routes []middleware.RoutesOption
	for _, n := range names {
		if rt := routing.TableOf(rs).Match(scenarioMethod(n)); rt != nil && rt.Guard != nil {
			routes = append(routes, middleware.RouteTo(scenarioMethod(n), guard(rt.Guard, n)))
		}
	}
	if def := routing.TableOf(rs).Default(); def != nil {
		routes = append(routes, middleware.DefaultRoute(guard(def.Guard, "")))
	}
	out, err := middleware.NewRoutes(routes...)
	require.NoError(t, err)
	return out
}

// causeRule is the degrade rule answering cause c (every rejection for
// CauseNone) with fn.
func causeRule(t *testing.T, c sluice.Cause, fn degrade.Func[any]) degrade.Rule[any] {
	switch c {
	case sluice.CauseRateLimited:
		return degrade.OnRateLimited(fn)
	case sluice.CauseCircuitOpen:
		return degrade.OnCircuitOpen(fn)
	case sluice.CauseOverloaded:
		return degrade.OnOverloaded(fn)
	case sluice.CauseConcurrencyLimited:
		return degrade.OnConcurrencyLimited(fn)
	case sluice.CauseTimeout:
		return degrade.OnTimeout(fn)
	case sluice.CauseNone:
		return degrade.OnRejected(fn)
	}
	t.Fatalf("no rule for cause %v", c)
	return degrade.Rule[any]{}
}

// TestCauses plays the causes table through the unary server interceptor:
// each fallback of the Guard answers with its text as the reply.
func TestCauses(t *testing.T) {
	scenario.RunCauses(t, func(text string) any { return text }, func(t *testing.T, g *sluice.Guard) func(scenario.Work) string {
		intercept := unary(t, WithGuard(g))
		handler := func(ctx context.Context, _ any) (any, error) {
			switch scenario.WorkFrom(ctx) {
			case scenario.Fail:
				return nil, status.Error(codes.Unavailable, "down")
			case scenario.Hang:
				<-ctx.Done()
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return "ok", nil
		}
		const method = "/sluice.scenario.Service/A"
		return func(w scenario.Work) string {
			ctx := grpc.NewContextWithServerTransportStream(scenario.WithWork(context.Background(), w), &headerStream{method: method})
			resp, err := intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, handler)
			if err != nil {
				return scenario.Failed(status.Code(err))
			}
			return resp.(string)
		}
	})
}
