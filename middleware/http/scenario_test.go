package sluicehttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
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
	opts := []Option{WithRoutes(rs), WithSkipper(func(r *http.Request) bool { return skip[r.URL.Path] })}
	if s.Keyer != nil {
		opts = append(opts, WithKeyer(s.Keyer))
	}
	if s.RouteResource {
		opts = append(opts, WithRouteResource())
	}
	require.Empty(t, s.Fallbacks, "the Guards declare the fallbacks")
	h := mw(t, opts...)(mux)
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

// httpFallback makes the Guard fallbacks of the scenarios: a handler
// answering 200 and the text.
func httpFallback(answers map[sluice.Cause]string) (sluice.Fallback, error) {
	var rules []degrade.Rule[http.Handler]
	for cause, text := range answers {
		h := degrade.Value[http.Handler](http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, text)
		}))
		switch cause {
		case sluice.CauseRateLimited:
			rules = append(rules, degrade.OnRateLimited(h))
		case sluice.CauseCircuitOpen:
			rules = append(rules, degrade.OnCircuitOpen(h))
		case sluice.CauseNone:
			rules = append(rules, degrade.OnRejected(h))
		default:
			return nil, fmt.Errorf("no rule for %v", cause)
		}
	}
	return degrade.New(rules...)
}

func TestScenarios(t *testing.T) { scenario.RunWith(t, httpTarget, httpFallback) }

// TestCauses plays the causes table through Middleware: each fallback of
// the Guard answers 200 and its text.
func TestCauses(t *testing.T) {
	scenario.RunCauses(t, answerText, func(t *testing.T, g *sluice.Guard) func(scenario.Work) string {
		h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch scenario.WorkFrom(r.Context()) {
			case scenario.Fail:
				http.Error(w, "down", http.StatusInternalServerError)
			case scenario.Hang:
				<-r.Context().Done()
			default:
				_, _ = io.WriteString(w, "ok")
			}
		}))
		return func(w scenario.Work) string { return scenario.ServeWork(h, w) }
	})
}

// answerText is a handler answering 200 and text.
func answerText(text string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, text) })
}
