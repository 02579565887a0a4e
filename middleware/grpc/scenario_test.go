package sluicegrpc

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/scenario"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// scenarioMethod maps the scenario's route names to full methods.
func scenarioMethod(name string) string {
	return "/sluice.scenario.Service/" + strings.ToUpper(name[:1]) + name[1:]
}

// TestScenarios runs the scenario table shared with the HTTP adapters
// through the unary server interceptor, called with each step's peer and
// metadata in its context.
func TestScenarios(t *testing.T) {
	scenario.Run(t, func(t *testing.T, s scenario.Setup) func(scenario.Step) scenario.Result {
		rs, err := s.Routes(scenarioMethod)
		require.NoError(t, err)
		for _, g := range rs.Guards() {
			t.Cleanup(func() { _ = g.Close() })
		}
		opts := []Option{WithRoutes(rs)}
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
		return func(st scenario.Step) scenario.Result {
			addr, err := net.ResolveTCPAddr("tcp", st.Peer)
			require.NoError(t, err)
			ctx, leave := context.WithCancel(context.Background()) // the client going away
			defer leave()
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: addr})
			md := metadata.MD{}
			for k, v := range st.Header {
				md.Append(k, v)
			}
			ctx = metadata.NewIncomingContext(ctx, md)
			var res scenario.Result
			_, err = intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: scenarioMethod(st.Route)}, func(context.Context, any) (any, error) {
				res.Ran = true
				switch st.Handler {
				case scenario.ClientError:
					return nil, status.Error(codes.InvalidArgument, "bad")
				case scenario.ServerError:
					return nil, status.Error(codes.Unavailable, "down")
				case scenario.ClientGone:
					leave()
					return nil, status.Error(codes.Unavailable, "upstream call cancelled")
				}
				return "ok", nil
			})
			if d, ok := RejectionOf(err); ok {
				res.Cause = sluice.CauseOf(d.Cause)
				res.RetryAfter = middleware.RetryAfterSeconds(d.RetryAfter)
			} else if status.Code(err) == codes.InvalidArgument && !res.Ran {
				res.MissingKey = true
			}
			return res
		}
	})
}
