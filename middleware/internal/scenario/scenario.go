// Package scenario is one table of request sequences that every sluice
// adapter (net/http, Echo, gRPC) runs, so that the same requests get the same
// decisions whatever the transport.
//
// An adapter's test calls Run with a Target: a function that builds the
// adapter for a Setup and returns a function serving one Step and telling
// what came back. Routes are named abstractly ("a", "b", "health"); the
// target maps each name to its own route syntax with Pattern.
package scenario

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/ratelimit"
)

// Handler is what the protected handler does with an admitted request.
type Handler int

const (
	// OK answers with success (HTTP 200, gRPC OK).
	OK Handler = iota
	// ClientError answers with the client's fault (HTTP 400, gRPC
	// InvalidArgument).
	ClientError
	// ServerError answers with a failure (HTTP 500, gRPC Unavailable).
	ServerError
	// ClientGone cancels the request's context, as a client that goes away
	// does, then answers with a failure (HTTP 502, gRPC Unavailable), as a
	// proxy whose upstream call was cancelled with it does.
	ClientGone
)

// Step is one request.
type Step struct {
	// Advance moves the scenario's clock before the request.
	Advance time.Duration
	// Route names the route: "a", "b" or "health".
	Route string
	// Peer is the direct peer's address; "" means "192.0.2.1:1234".
	Peer string
	// Header holds request header fields (gRPC: metadata, in lower case).
	Header map[string]string
	// Handler is what the handler does if the request is admitted.
	Handler Handler
	// Want is the expected result.
	Want Result
}

// Result is what came back for one request, as far as the decision goes.
type Result struct {
	// Ran reports that the handler ran.
	Ran bool
	// Cause is the cause of a rejection; CauseNone when admitted.
	Cause sluice.Cause
	// RetryAfter is the rejection's delay in whole seconds (HTTP
	// Retry-After, gRPC RetryInfo rounded up); 0 when admitted.
	RetryAfter int64
	// MissingKey reports a rejection for a missing key (HTTP 400, gRPC
	// InvalidArgument).
	MissingKey bool
}

// Setup is what a Target builds its adapter from.
type Setup struct {
	// Clock is the scenario's clock, shared by its Guards.
	Clock *sluice.ManualClock
	// Routes builds the route table with the target's route syntax.
	Routes func(pattern func(name string) string) (*middleware.Routes, error)
	// Keyer, when not nil, keys requests.
	Keyer *middleware.Keyer
	// Skip lists the route names that bypass the guard.
	Skip []string
	// RouteResource puts each request's route in its context as its
	// resource (HTTP and Echo WithRouteResource, gRPC WithMethodResource).
	RouteResource bool
}

// Target builds an adapter for s and returns the function that serves one
// step through it.
type Target func(t *testing.T, s Setup) func(st Step) Result

// Scenario is one sequence of requests through one setup.
type Scenario struct {
	Name  string
	Setup func(clock *sluice.ManualClock) (Setup, error)
	Steps []Step
}

// FromHTTP reads the Result of an HTTP answer: 429 is a rate limit, 503
// without the handler having run an open circuit, 400 without it a missing
// key; the delay comes from Retry-After.
func FromHTTP(ran bool, status int, header http.Header) (Result, error) {
	res := Result{Ran: ran}
	switch {
	case ran:
	case status == http.StatusTooManyRequests:
		res.Cause = sluice.CauseRateLimited
	case status == http.StatusServiceUnavailable:
		res.Cause = sluice.CauseCircuitOpen
	case status == http.StatusBadRequest:
		res.MissingKey = true
	}
	if res.Cause != sluice.CauseNone {
		s, err := strconv.ParseInt(header.Get("Retry-After"), 10, 64)
		if err != nil {
			return res, fmt.Errorf("scenario: Retry-After %q: %w", header.Get("Retry-After"), err)
		}
		res.RetryAfter = s
	}
	return res, nil
}

// DefaultPeer is the peer of steps that name none.
const DefaultPeer = "192.0.2.1:1234"

// Run runs every scenario against target.
func Run(t *testing.T, target Target) {
	for _, sc := range All() {
		t.Run(sc.Name, func(t *testing.T) {
			clock := sluice.NewManualClock(time.Hour)
			s, err := sc.Setup(clock)
			require.NoError(t, err)
			serve := target(t, s)
			for i, st := range sc.Steps {
				clock.Advance(st.Advance)
				if st.Peer == "" {
					st.Peer = DefaultPeer
				}
				got := serve(st)
				require.Equal(t, st.Want, got, "step %d: %+v", i, st)
			}
		})
	}
}

var (
	admitted = Result{Ran: true}
	limited  = func(s int64) Result { return Result{Cause: sluice.CauseRateLimited, RetryAfter: s} }
	open     = func(s int64) Result { return Result{Cause: sluice.CauseCircuitOpen, RetryAfter: s} }
)

// everywhere returns a Setup that guards every route with one Guard of
// policy p on clock, keyed by keyer (nil: not keyed).
func everywhere(clock *sluice.ManualClock, p sluice.Policy, keyer *middleware.Keyer, err error) (Setup, error) {
	if err != nil {
		return Setup{}, err
	}
	g, err := sluice.New(sluice.With(p), sluice.WithClock(clock))
	if err != nil {
		return Setup{}, err
	}
	return Setup{Clock: clock, Keyer: keyer, Routes: func(func(string) string) (*middleware.Routes, error) {
		return middleware.NewRoutes(middleware.DefaultRoute(g))
	}}, nil
}

// perKeyWindow is a keyed limiter: one request per key per minute.
func perKeyWindow() (*ratelimit.Keyed, error) {
	return ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewFixedWindow(1, time.Minute)
	})
}

// perRouteBreakers are the steps of a breaker.Group that keeps a breaker
// per resource: route a's failures open its circuit and not route b's.
var perRouteBreakers = []Step{
	{Route: "a", Handler: ServerError, Want: admitted},
	{Route: "b", Handler: ServerError, Want: admitted},
	{Route: "a", Handler: ServerError, Want: admitted},
	{Route: "a", Want: open(30)},
	{Route: "b", Advance: 10 * time.Second, Want: admitted},
	{Route: "a", Want: open(20)},
	{Route: "a", Advance: 20 * time.Second, Want: admitted},
}

// All returns the scenarios.
func All() []Scenario {
	return []Scenario{
		{
			Name: "rate limit on one route, another passes through",
			Setup: func(clock *sluice.ManualClock) (Setup, error) {
				fw, err := ratelimit.NewFixedWindow(2, 10*time.Second, ratelimit.WithName("ratelimit/a"))
				if err != nil {
					return Setup{}, err
				}
				g, err := sluice.New(sluice.With(fw), sluice.WithClock(clock))
				if err != nil {
					return Setup{}, err
				}
				return Setup{Clock: clock, Routes: func(p func(string) string) (*middleware.Routes, error) {
					return middleware.NewRoutes(middleware.RouteTo(p("a"), g))
				}}, nil
			},
			Steps: []Step{
				{Route: "a", Want: admitted},
				{Route: "a", Advance: 2 * time.Second, Want: admitted},
				{Route: "a", Advance: 500 * time.Millisecond, Want: limited(8)},
				{Route: "b", Want: admitted},
				{Route: "a", Advance: 7500 * time.Millisecond, Want: admitted},
			},
		},
		{
			Name: "server errors trip the breaker, client errors do not",
			Setup: func(clock *sluice.ManualClock) (Setup, error) {
				b, err := breaker.New("a", breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(30*time.Second))
				return everywhere(clock, b, nil, err)
			},
			Steps: []Step{
				{Route: "a", Handler: ClientError, Want: admitted},
				{Route: "a", Handler: ClientError, Want: admitted},
				{Route: "a", Handler: ClientError, Want: admitted},
				{Route: "a", Handler: ServerError, Want: admitted},
				{Route: "b", Handler: ServerError, Want: admitted},
				{Route: "a", Want: open(30)},
				{Route: "b", Advance: 10 * time.Second, Want: open(20)},
				{Route: "a", Advance: 20 * time.Second, Want: admitted},
				{Route: "a", Want: admitted},
			},
		},
		{
			Name: "a client that went away does not trip the breaker",
			Setup: func(clock *sluice.ManualClock) (Setup, error) {
				b, err := breaker.New("a", breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(30*time.Second))
				return everywhere(clock, b, nil, err)
			},
			Steps: []Step{
				{Route: "a", Handler: ClientGone, Want: admitted},
				{Route: "a", Handler: ClientGone, Want: admitted},
				{Route: "a", Handler: ServerError, Want: admitted},
				{Route: "a", Want: open(30)},
			},
		},
		{
			Name: "per-client limit ignores a spoofed X-Forwarded-For",
			Setup: func(clock *sluice.ManualClock) (Setup, error) {
				ipx, err := middleware.NewIPExtractor(middleware.TrustedProxies("10.0.0.0/8"))
				if err != nil {
					return Setup{}, err
				}
				keyer, err := middleware.NewKeyer(middleware.MissingKey{}, middleware.KeyByIP(ipx))
				if err != nil {
					return Setup{}, err
				}
				k, err := perKeyWindow()
				return everywhere(clock, k, keyer, err)
			},
			Steps: []Step{
				{Route: "a", Peer: "203.0.113.1:1000", Want: admitted},
				{Route: "a", Peer: "203.0.113.1:1001", Want: limited(60)},
				{Route: "a", Peer: "203.0.113.1:1002", Header: map[string]string{"x-forwarded-for": "198.51.100.77"}, Want: limited(60)},
				{Route: "a", Peer: "203.0.113.2:1000", Want: admitted},
				{Route: "a", Peer: "10.0.0.1:1000", Header: map[string]string{"x-forwarded-for": "198.51.100.5, 10.0.0.2"}, Want: admitted},
				{Route: "a", Peer: "10.0.0.9:1000", Header: map[string]string{"x-forwarded-for": "198.51.100.5"}, Want: limited(60)},
				{Route: "a", Peer: "10.0.0.9:1000", Header: map[string]string{"x-forwarded-for": "198.51.100.6"}, Want: admitted},
				{Route: "a", Advance: time.Minute, Peer: "203.0.113.1:1000", Want: admitted},
			},
		},
		{
			Name: "a missing key is rejected when configured so",
			Setup: func(clock *sluice.ManualClock) (Setup, error) {
				keyer, err := middleware.NewKeyer(middleware.RejectMissingKey(), middleware.KeyByHeader("x-api-key"))
				if err != nil {
					return Setup{}, err
				}
				k, err := perKeyWindow()
				return everywhere(clock, k, keyer, err)
			},
			Steps: []Step{
				{Route: "a", Want: Result{MissingKey: true}},
				{Route: "a", Header: map[string]string{"x-api-key": "k1"}, Want: admitted},
				{Route: "a", Header: map[string]string{"x-api-key": "k1"}, Want: limited(60)},
				{Route: "a", Header: map[string]string{"x-api-key": "k2"}, Want: admitted},
			},
		},
		{
			Name: "a breaker group keeps a breaker per route named as the resource",
			Setup: func(clock *sluice.ManualClock) (Setup, error) {
				grp, err := breaker.NewGroup("routes", breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(30*time.Second))
				s, err := everywhere(clock, grp, nil, err)
				s.RouteResource = true
				return s, err
			},
			Steps: perRouteBreakers,
		},
		{
			Name: "a keyed request names its route as the resource",
			Setup: func(clock *sluice.ManualClock) (Setup, error) {
				keyer, err := middleware.NewKeyer(middleware.SharedKey("anonymous"), middleware.KeyByHeader("x-api-key"))
				if err != nil {
					return Setup{}, err
				}
				grp, err := breaker.NewGroup("routes", breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(30*time.Second))
				return everywhere(clock, grp, keyer, err)
			},
			Steps: perRouteBreakers,
		},
		{
			Name: "skipped route bypasses an open breaker",
			Setup: func(clock *sluice.ManualClock) (Setup, error) {
				b, err := breaker.New("all", breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(5*time.Second))
				s, err := everywhere(clock, b, nil, err)
				s.Skip = []string{"health"}
				return s, err
			},
			Steps: []Step{
				{Route: "a", Handler: ServerError, Want: admitted},
				{Route: "a", Want: open(5)},
				{Route: "health", Want: admitted},
				{Route: "health", Handler: ServerError, Want: admitted},
				{Route: "b", Advance: 1500 * time.Millisecond, Want: open(4)},
			},
		},
	}
}
