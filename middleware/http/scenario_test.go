package sluicehttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/middleware/internal/scenario"
)

// httpTarget serves the shared scenarios through Middleware wrapping an
// http.ServeMux with one route per scenario route name.
func httpTarget(t *testing.T, s scenario.Setup) func(scenario.Step) scenario.Result {
	rs, err := s.Routes(func(name string) string { return "GET /" + name })
	require.NoError(t, err)
	skip := map[string]bool{}
	for _, n := range s.Skip {
		skip["/"+n] = true
	}
	var ran bool
	var next scenario.Handler
	var leave context.CancelFunc // the client going away
	mux := http.NewServeMux()
	for _, name := range []string{"a", "b", "health"} {
		mux.HandleFunc("GET /"+name, func(w http.ResponseWriter, _ *http.Request) {
			ran = true
			switch next {
			case scenario.ClientError:
				w.WriteHeader(http.StatusBadRequest)
			case scenario.ServerError:
				w.WriteHeader(http.StatusInternalServerError)
			case scenario.ClientGone:
				leave()
				w.WriteHeader(http.StatusBadGateway)
			default:
				w.WriteHeader(http.StatusOK)
			}
		})
	}
	opts := []Option{WithRoutes(rs), WithKeyer(s.Keyer),
		WithSkipper(func(r *http.Request) bool { return skip[r.URL.Path] })}
	if s.RouteResource {
		opts = append(opts, WithRouteResource())
	}
	h := Middleware(opts...)(mux)
	return func(st scenario.Step) scenario.Result {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ran, next, leave = false, st.Handler, cancel
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/"+st.Route, nil)
		req.RemoteAddr = st.Peer
		for k, v := range st.Header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		res, err := scenario.FromHTTP(ran, rec.Code, rec.Header())
		require.NoError(t, err)
		return res
	}
}

func TestScenarios(t *testing.T) { scenario.Run(t, httpTarget) }
