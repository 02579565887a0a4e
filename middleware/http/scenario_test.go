package sluicehttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/middleware/internal/scenario"
)

// httpPattern maps a scenario route name ("a", "POST a") to its
// http.ServeMux pattern: "GET /a", "POST /a".
func httpPattern(name string) string {
	method, route := scenario.SplitRoute(name)
	if method == "" {
		method = http.MethodGet
	}
	return method + " /" + route
}

// httpTarget serves the shared scenarios through Middleware wrapping an
// http.ServeMux with a GET and a POST route per scenario route name. A
// handler passes a rejection its call met to Reject.
func httpTarget(t *testing.T, s scenario.Setup) func(scenario.Step) scenario.Result {
	rs, err := s.Routes(httpPattern)
	require.NoError(t, err)
	skip := map[string]bool{}
	for _, n := range s.Skip {
		skip["/"+n] = true
	}
	mux := http.NewServeMux()
	for _, name := range []string{"a", "b", "health"} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			mux.HandleFunc(method+" /"+name, func(w http.ResponseWriter, r *http.Request) {
				switch h, err := scenario.Act(r.Context()); h {
				case scenario.ClientError:
					w.WriteHeader(http.StatusBadRequest)
				case scenario.ServerError:
					w.WriteHeader(http.StatusInternalServerError)
				case scenario.ClientGone:
					w.WriteHeader(http.StatusBadGateway)
				case scenario.Rejected, scenario.RejectedWrapped:
					if !Reject(w, r, err) {
						http.Error(w, err.Error(), http.StatusInternalServerError)
					}
				default:
					w.WriteHeader(http.StatusOK)
				}
			})
		}
	}
	opts := []Option{WithRoutes(rs), WithKeyer(s.Keyer),
		WithSkipper(func(r *http.Request) bool { return skip[r.URL.Path] })}
	if s.RouteResource {
		opts = append(opts, WithRouteResource())
	}
	for _, f := range s.Fallbacks {
		route := ""
		if f.Route != "" {
			route = httpPattern(f.Route)
		}
		fb, err := StaticFallback(http.StatusOK, nil, []byte(scenario.FallbackAnswer(f)))
		require.NoError(t, err)
		opts = append(opts, WithFallback(route, f.Cause, fb))
	}
	h := Middleware(opts...)(mux)
	var serve func(scenario.Step) scenario.Result
	serve = func(st scenario.Step) scenario.Result {
		ctx, call := scenario.NewCall(context.Background(), st, serve)
		defer call.End()
		req := scenario.HTTPRequest(ctx, st)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		res, err := scenario.FromHTTP(call.Ran(), rec.Code, rec.Header(), rec.Body.Bytes())
		require.NoError(t, err)
		return call.Result(res)
	}
	return serve
}

func TestScenarios(t *testing.T) { scenario.Run(t, httpTarget) }
