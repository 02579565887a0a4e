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
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/routing"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
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
	// Rejected is a handler whose own call to a dependency met a sluice
	// rejection, the sluice.Rejection of the step's Met, and hands it
	// on as its adapter asks: net/http passes it to sluicehttp.Reject,
	// Echo and gRPC handlers return it. A handler whose rejection is not
	// taken answers 500 (gRPC: Unknown) with the error's text, as a naive
	// one does.
	Rejected
	// RejectedWrapped is Rejected with the rejection wrapped:
	// fmt.Errorf("%s: %w", WrapperText, rejection).
	RejectedWrapped
	// Reenter serves the step's During request through the same adapter
	// while the handler runs, so that both are in flight at once, then
	// answers with success.
	Reenter
)

// WrapperText is the text a RejectedWrapped handler wraps its rejection
// with; it never reaches the client.
const WrapperText = "payments: charge card 4242"

// Step is one request.
type Step struct {
	// Advance moves the scenario's clock before the request.
	Advance time.Duration
	// Method is the request's HTTP method; "" means GET. A gRPC target
	// maps each method and route to a method of its own (see
	// SplitRoute).
	Method string
	// Route names the route: "a", "b" or "health".
	Route string
	// Peer is the direct peer's address; "" means "192.0.2.1:1234".
	Peer string
	// Header holds request header fields (gRPC: metadata, in lower case).
	Header map[string]string
	// Handler is what the handler does if the request is admitted.
	Handler Handler
	// Met is the rejection a Rejected or RejectedWrapped handler's call
	// met.
	Met sluice.Decision
	// During is the request a Reenter handler makes while it runs.
	During *Step
	// Want is the expected result.
	Want Result
}

// Result is what came back for one request, as far as the decision goes.
type Result struct {
	// Ran reports that the handler ran.
	Ran bool
	// Cause is the cause of a rejection, the adapter's own or one the
	// handler's call met; CauseNone when none. HTTP targets read it from
	// the problem body's type, gRPC ones from the ErrorInfo's reason; the
	// status or code must be the cause's (429 or 503, ResourceExhausted or
	// Unavailable) and the delay given (Retry-After, RetryInfo).
	Cause sluice.Cause
	// RetryAfter is the rejection's delay in whole seconds (HTTP
	// Retry-After, gRPC RetryInfo rounded up); 0 when admitted.
	RetryAfter int64
	// MissingKey reports a rejection for a missing key (HTTP 400, gRPC
	// InvalidArgument).
	MissingKey bool
	// RateLimitPolicy and RateLimit are the values of the draft
	// RateLimit-Policy and RateLimit fields (gRPC: header metadata, which
	// a gRPC target asks for on admitted calls too), each value once,
	// joined with ", " when there are more; "" when there are none.
	RateLimitPolicy, RateLimit string
	// Leaked reports that the answer (HTTP body, gRPC status message)
	// carries WrapperText.
	Leaked bool
	// Outcomes counts the outcomes the Setup's Counter heard during the
	// step (its During request included); nil when it has no Counter or
	// heard nothing. Run fills it in.
	Outcomes map[sluice.Outcome]int
	// During is the result of the step's During request.
	During *Result
	// Fallback names the fallback that answered ("a rate-limited", "*
	// any"; see FallbackAnswer); "" when none did.
	Fallback string
}

// Setup is what a Target builds its adapter from.
type Setup struct {
	// Clock is the scenario's clock, shared by its Guards.
	Clock *sluice.ManualClock
	// Routes builds the route table with the target's route syntax: a name
	// is a route name ("a") or a method and a route name ("POST a"), which
	// pattern maps to the target's syntax.
	Routes func(pattern func(name string) string) (*middleware.Routes, error)
	// Keyer, when not nil, keys requests.
	Keyer *middleware.Keyer
	// Skip lists the route names that bypass the guard.
	Skip []string
	// RouteResource puts each request's route in its context as its
	// resource (HTTP and Echo WithRouteResource, gRPC WithMethodResource).
	RouteResource bool
	// Counter, when not nil, is a policy of the scenario's Guards whose
	// outcomes each step's Result counts.
	Counter *testpolicy.Counter
	// Fallbacks are the fallbacks the target declares, each answering
	// with FallbackAnswer of itself: HTTP status 200 and that text as the
	// body, gRPC that text as the reply.
	Fallbacks []Fallback
}

// Fallback is a fallback for the rejections of a route name ("" for every
// route) for a cause (CauseNone for every cause).
type Fallback struct {
	Route string
	Cause sluice.Cause
}

// fallbackPrefix starts every fallback's answer.
const fallbackPrefix = "fallback "

// FallbackAnswer is what fallback f answers with: "fallback a
// rate-limited", "fallback * any".
func FallbackAnswer(f Fallback) string {
	route, cause := f.Route, f.Cause.String()
	if route == "" {
		route = "*"
	}
	if f.Cause == sluice.CauseNone {
		cause = "any"
	}
	return fallbackPrefix + route + " " + cause
}

// FallbackOf returns the fallback that answer names, as Result.Fallback
// holds it ("a rate-limited"), or "" when answer is no fallback's.
func FallbackOf(answer string) string {
	f, _ := strings.CutPrefix(answer, fallbackPrefix)
	if f == answer {
		return ""
	}
	return f
}

// SplitRoute splits a route name of a Setup's table ("POST a", "a") into
// its method ("" for none) and route name.
func SplitRoute(name string) (method, route string) {
	if i := strings.IndexByte(name, ' '); i >= 0 {
		return name[:i], name[i+1:]
	}
	return "", name
}

// Target builds an adapter for s and returns the function that serves one
// step through it. The function starts each request with NewCall, and the
// handlers it serves call Act.
type Target func(t *testing.T, s Setup) func(st Step) Result

// Scenario is one sequence of requests through one setup.
type Scenario struct {
	Name  string
	Setup func(clock *sluice.ManualClock, mk MakeFallback) (Setup, error)
	Steps []Step
}

// MakeFallback makes a Guard fallback, of the type a target answers with,
// that answers the rejections of each cause of answers with its text (HTTP
// status 200 and the text as the body, gRPC the text as the reply);
// sluice.CauseNone stands for every rejection.
type MakeFallback func(answers map[sluice.Cause]string) (sluice.Fallback, error)

// Call is one request on its way through a target.
type Call struct {
	step   Step
	serve  func(Step) Result
	leave  context.CancelFunc
	ran    bool
	during *Result
}

type callKey struct{}

// NewCall starts the request of st: its context, which carries the call
// for Act and which a ClientGone handler cancels, and the call, to End once
// answered. serve is the target's function, which serves a Reenter
// handler's During request.
func NewCall(parent context.Context, st Step, serve func(Step) Result) (context.Context, *Call) {
	ctx, cancel := context.WithCancel(parent)
	c := &Call{step: st, serve: serve, leave: cancel}
	return context.WithValue(ctx, callKey{}, c), c
}

// End ends the call's context.
func (c *Call) End() { c.leave() }

// Result completes res, read from the answer, with what the handler did:
// whether it ran, and its During request's result.
func (c *Call) Result(res Result) Result {
	res.Ran = c.ran
	res.During = c.during
	return res
}

// Ran reports whether the call's handler ran.
func (c *Call) Ran() bool { return c.ran }

// Act does the part of the handler of the call in ctx that is the same for
// every target: it marks the call as run, cancels its context for
// ClientGone, serves the During request for Reenter, and returns what the
// handler answers: its Handler (OK after Reenter) and, for Rejected and
// RejectedWrapped, the error its call met.
func Act(ctx context.Context) (Handler, error) {
	c, _ := ctx.Value(callKey{}).(*Call)
	if c == nil {
		panic("scenario: Act outside a call made by NewCall")
	}
	c.ran = true
	switch c.step.Handler {
	case ClientGone:
		c.leave()
	case Reenter:
		if c.step.During != nil {
			st := *c.step.During
			if st.Peer == "" {
				st.Peer = DefaultPeer
			}
			res := c.serve(st)
			c.during = &res
		}
		return OK, nil
	case Rejected:
		return Rejected, sluice.Rejection(c.step.Met)
	case RejectedWrapped:
		return RejectedWrapped, fmt.Errorf("%s: %w", WrapperText, sluice.Rejection(c.step.Met))
	}
	return c.step.Handler, nil
}

// causeOfType returns the cause a problem type names
// ("urn:sluice:problem:rate-limited"), and false for another type.
func causeOfType(typ string) (sluice.Cause, bool) {
	name, ok := strings.CutPrefix(typ, routing.DefaultProblemTypeBase)
	if !ok {
		return sluice.CauseNone, false
	}
	for c := sluice.CauseRateLimited; c <= sluice.CauseTimeout; c++ {
		if c.String() == name {
			return c, true
		}
	}
	return sluice.CauseNone, false
}

// joinValues joins a field's values with ", ".
func joinValues(vs []string) string { return strings.Join(vs, ", ") }

// HTTPRequest returns the request of step st for the HTTP adapters, made
// with ctx: its method (GET when none), route, peer and header fields.
func HTTPRequest(ctx context.Context, st Step) *http.Request {
	method := st.Method
	if method == "" {
		method = http.MethodGet
	}
	req := httptest.NewRequestWithContext(ctx, method, "/"+st.Route, nil)
	req.RemoteAddr = st.Peer
	for k, v := range st.Header {
		req.Header.Set(k, v)
	}
	return req
}

// FromHTTP reads the Result of an HTTP answer with body: a 429 or 503 that
// the handler did not answer, or that carries Retry-After, is a rejection
// whose cause the problem body's type names (an open circuit when it names
// none) and whose delay Retry-After gives; a 400 without the handler having
// run is a missing key.
func FromHTTP(ran bool, status int, header http.Header, body []byte) (Result, error) {
	res := Result{
		RateLimitPolicy: joinValues(header.Values(routing.FieldRateLimitPolicy)),
		RateLimit:       joinValues(header.Values(routing.FieldRateLimit)),
		Leaked:          bytes.Contains(body, []byte(WrapperText)),
	}
	if status == http.StatusOK {
		res.Fallback = FallbackOf(string(body))
	}
	rejection := (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) &&
		(!ran || header.Get("Retry-After") != "")
	switch {
	case rejection:
		res.Cause = sluice.CauseCircuitOpen
		if status == http.StatusTooManyRequests {
			res.Cause = sluice.CauseRateLimited
		}
		var problem struct{ Type string }
		if json.Unmarshal(body, &problem) == nil {
			if c, ok := causeOfType(problem.Type); ok {
				res.Cause = c
			}
		}
		if want := routing.HTTPStatus(res.Cause); status != want {
			return res, fmt.Errorf("scenario: %s answered with %d, not %d", res.Cause, status, want)
		}
		s, err := strconv.ParseInt(header.Get("Retry-After"), 10, 64)
		if err != nil {
			return res, fmt.Errorf("scenario: Retry-After %q: %w", header.Get("Retry-After"), err)
		}
		res.RetryAfter = s
	case status == http.StatusBadRequest && !ran:
		res.MissingKey = true
	}
	return res, nil
}

// DefaultPeer is the peer of steps that name none.
const DefaultPeer = "192.0.2.1:1234"

// Run runs every scenario against target, which takes the fallbacks of
// each Setup's Fallbacks.
func Run(t *testing.T, target Target) { RunWith(t, target, nil) }

// RunWith runs every scenario against target; the scenarios' Guards take
// their fallbacks made by mk (Setup.Fallbacks is then empty), or, when mk is
// nil, the target takes them from Setup.Fallbacks.
func RunWith(t *testing.T, target Target, mk MakeFallback) {
	for _, sc := range All() {
		t.Run(sc.Name, func(t *testing.T) {
			clock := sluice.NewManualClock(time.Hour)
			s, err := sc.Setup(clock, mk)
			require.NoError(t, err)
			serve := target(t, s)
			for i, st := range sc.Steps {
				clock.Advance(st.Advance)
				if st.Peer == "" {
					st.Peer = DefaultPeer
				}
				var before map[sluice.Outcome]int
				if s.Counter != nil {
					before = s.Counter.Outcomes()
				}
				got := serve(st)
				if s.Counter != nil {
					for o, n := range s.Counter.Outcomes() {
						if d := n - before[o]; d != 0 {
							if got.Outcomes == nil {
								got.Outcomes = map[sluice.Outcome]int{}
							}
							got.Outcomes[o] = d
						}
					}
				}
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

// keyedAdmitted and keyedLimited are the results of a request admitted and
// one rejected by perKeyWindow, at the start of a key's window.
var (
	keyedAdmitted = admitted.withQuota("ratelimit/keyed", 1, 60, 0, 60)
	keyedLimited  = limited(60).withQuota("ratelimit/keyed", 1, 60, 0, 60)
)

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

// withQuota returns res with the RateLimit fields of the policy name: its
// quota q over w seconds (w 0: unknown), r left, whole again in t seconds.
func (res Result) withQuota(name string, q, w, r, t int64) Result {
	res.RateLimitPolicy = fmt.Sprintf("%q;q=%d", name, q)
	if w > 0 {
		res.RateLimitPolicy += fmt.Sprintf(";w=%d", w)
	}
	res.RateLimit = fmt.Sprintf("%q;r=%d;t=%d", name, r, t)
	return res
}

// counted returns res with the outcomes its step's Guard heard.
func (res Result) counted(o ...sluice.Outcome) Result {
	res.Outcomes = map[sluice.Outcome]int{}
	for _, x := range o {
		res.Outcomes[x]++
	}
	return res
}

// met is what the handler's calls to its dependency met: its breaker open
// for 20 s, its rate limit (with a quota of its own) spent for 1.5 s.
var (
	metOpen    = sluice.Decision{Policy: "breaker/payments", Limit: -1, RetryAfter: 20 * time.Second, Cause: sluice.ErrCircuitOpen}
	metLimited = sluice.Decision{Policy: "ratelimit/payments", Limit: 10, Remaining: 0, Reset: 1500 * time.Millisecond, RetryAfter: 1500 * time.Millisecond, Cause: sluice.ErrRateLimited}
)

// handlerRejections are the steps of a route guarded by a counter and the
// limiter "ratelimit/a" (5 a minute), whose handler's calls meet
// rejections.
var handlerRejections = func() []Step {
	a := func(r int64) Result { return admitted.withQuota("ratelimit/a", 5, 60, r, 60) }
	return []Step{
		{Route: "a", Want: a(4).counted(sluice.Success)},
		{Route: "a", Handler: Rejected, Met: metOpen, Want: Result{Ran: true, Cause: sluice.CauseCircuitOpen, RetryAfter: 20}.withQuota("ratelimit/a", 5, 60, 3, 60).counted(sluice.Ignored)},
		{Route: "a", Handler: RejectedWrapped, Met: metOpen, Want: Result{Ran: true, Cause: sluice.CauseCircuitOpen, RetryAfter: 20}.withQuota("ratelimit/a", 5, 60, 2, 60).counted(sluice.Ignored)},
		{Route: "a", Handler: RejectedWrapped, Met: metLimited, Want: Result{Ran: true, Cause: sluice.CauseRateLimited, RetryAfter: 2}.withQuota("ratelimit/payments", 10, 0, 0, 2).counted(sluice.Ignored)},
		{Route: "a", Handler: ServerError, Want: a(0).counted(sluice.Failure)},
		{Route: "a", Handler: Rejected, Met: metOpen, Want: Result{Cause: sluice.CauseRateLimited, RetryAfter: 60}.withQuota("ratelimit/a", 5, 60, 0, 60).counted(sluice.Released)},
	}
}()

// All returns the scenarios.
func All() []Scenario {
	return []Scenario{
		{
			Name: "rate limit on one route, another passes through",
			Setup: func(clock *sluice.ManualClock, mk MakeFallback) (Setup, error) {
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
				{Route: "a", Want: admitted.withQuota("ratelimit/a", 2, 10, 1, 10)},
				{Route: "a", Advance: 2 * time.Second, Want: admitted.withQuota("ratelimit/a", 2, 10, 0, 8)},
				{Route: "a", Advance: 500 * time.Millisecond, Want: limited(8).withQuota("ratelimit/a", 2, 10, 0, 8)},
				{Route: "b", Want: admitted},
				{Route: "a", Advance: 7500 * time.Millisecond, Want: admitted.withQuota("ratelimit/a", 2, 10, 1, 10)},
			},
		},
		{
			Name: "server errors trip the breaker, client errors do not",
			Setup: func(clock *sluice.ManualClock, mk MakeFallback) (Setup, error) {
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
			Setup: func(clock *sluice.ManualClock, mk MakeFallback) (Setup, error) {
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
			Setup: func(clock *sluice.ManualClock, mk MakeFallback) (Setup, error) {
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
				{Route: "a", Peer: "203.0.113.1:1000", Want: keyedAdmitted},
				{Route: "a", Peer: "203.0.113.1:1001", Want: keyedLimited},
				{Route: "a", Peer: "203.0.113.1:1002", Header: map[string]string{"x-forwarded-for": "198.51.100.77"}, Want: keyedLimited},
				{Route: "a", Peer: "203.0.113.2:1000", Want: keyedAdmitted},
				{Route: "a", Peer: "10.0.0.1:1000", Header: map[string]string{"x-forwarded-for": "198.51.100.5, 10.0.0.2"}, Want: keyedAdmitted},
				{Route: "a", Peer: "10.0.0.9:1000", Header: map[string]string{"x-forwarded-for": "198.51.100.5"}, Want: keyedLimited},
				{Route: "a", Peer: "10.0.0.9:1000", Header: map[string]string{"x-forwarded-for": "198.51.100.6"}, Want: keyedAdmitted},
				{Route: "a", Advance: time.Minute, Peer: "203.0.113.1:1000", Want: keyedAdmitted},
			},
		},
		{
			Name: "a missing key is rejected when configured so",
			Setup: func(clock *sluice.ManualClock, mk MakeFallback) (Setup, error) {
				keyer, err := middleware.NewKeyer(middleware.RejectMissingKey(), middleware.KeyByHeader("x-api-key"))
				if err != nil {
					return Setup{}, err
				}
				k, err := perKeyWindow()
				return everywhere(clock, k, keyer, err)
			},
			Steps: []Step{
				{Route: "a", Want: Result{MissingKey: true}},
				{Route: "a", Header: map[string]string{"x-api-key": "k1"}, Want: keyedAdmitted},
				{Route: "a", Header: map[string]string{"x-api-key": "k1"}, Want: keyedLimited},
				{Route: "a", Header: map[string]string{"x-api-key": "k2"}, Want: keyedAdmitted},
			},
		},
		{
			Name: "a breaker group keeps a breaker per route named as the resource",
			Setup: func(clock *sluice.ManualClock, mk MakeFallback) (Setup, error) {
				grp, err := breaker.NewGroup("routes", breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(30*time.Second))
				s, err := everywhere(clock, grp, nil, err)
				s.RouteResource = true
				return s, err
			},
			Steps: perRouteBreakers,
		},
		{
			Name: "a keyed request names its route as the resource",
			Setup: func(clock *sluice.ManualClock, mk MakeFallback) (Setup, error) {
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
			Setup: func(clock *sluice.ManualClock, mk MakeFallback) (Setup, error) {
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
		{
			Name: "a rejection the handler's call met is answered as the route's own and ignored",
			Setup: func(clock *sluice.ManualClock, mk MakeFallback) (Setup, error) {
				fw, err := ratelimit.NewFixedWindow(5, time.Minute, ratelimit.WithName("ratelimit/a"))
				if err != nil {
					return Setup{}, err
				}
				counter := testpolicy.NewCounter()
				g, err := sluice.New(sluice.With(counter, fw), sluice.WithClock(clock))
				if err != nil {
					return Setup{}, err
				}
				return Setup{Clock: clock, Counter: counter, Routes: func(p func(string) string) (*middleware.Routes, error) {
					return middleware.NewRoutes(middleware.RouteTo(p("a"), g))
				}}, nil
			},
			Steps: handlerRejections,
		},
		{
			Name: "a bulkhead beside a rate limit: the limit's fields, none on a concurrency rejection",
			Setup: func(clock *sluice.ManualClock, mk MakeFallback) (Setup, error) {
				fw, err := ratelimit.NewFixedWindow(3, time.Minute, ratelimit.WithName("ratelimit/a"))
				if err != nil {
					return Setup{}, err
				}
				bh, err := adaptive.NewBulkhead(1)
				if err != nil {
					return Setup{}, err
				}
				counter := testpolicy.NewCounter()
				g, err := sluice.New(sluice.With(counter, fw, bh), sluice.WithClock(clock))
				if err != nil {
					return Setup{}, err
				}
				return Setup{Clock: clock, Counter: counter, Routes: func(p func(string) string) (*middleware.Routes, error) {
					return middleware.NewRoutes(middleware.DefaultRoute(g))
				}}, nil
			},
			Steps: []Step{
				{Route: "a", Want: admitted.withQuota("ratelimit/a", 3, 60, 2, 60).counted(sluice.Success)},
				{Route: "a", Handler: Reenter, During: &Step{Route: "b"}, Want: func() Result {
					r := admitted.withQuota("ratelimit/a", 3, 60, 1, 60).counted(sluice.Success, sluice.Released)
					r.During = &Result{Cause: sluice.CauseConcurrencyLimited, RetryAfter: 1}
					return r
				}()},
				{Route: "b", Advance: 10 * time.Second, Want: admitted.withQuota("ratelimit/a", 3, 60, 0, 50).counted(sluice.Success)},
				{Route: "a", Want: limited(50).withQuota("ratelimit/a", 3, 60, 0, 50).counted(sluice.Released)},
			},
		},
		{
			Name: "fallbacks answer rejections by route and cause, the Guard's and the handler's alike",
			Setup: func(clock *sluice.ManualClock, mk MakeFallback) (Setup, error) {
				fw, err := ratelimit.NewFixedWindow(1, time.Minute, ratelimit.WithName("ratelimit/a"))
				if err != nil {
					return Setup{}, err
				}
				counter := testpolicy.NewCounter()
				fallbacks := []Fallback{{"a", sluice.CauseRateLimited}, {"", sluice.CauseCircuitOpen}}
				// With mk, each route's Guard declares the fallbacks of
				// its route and those of every route.
				var fa, fb []sluice.Option
				if mk != nil {
					for _, f := range []struct {
						opts   *[]sluice.Option
						routes []string
					}{{&fa, []string{"a", ""}}, {&fb, []string{"b", ""}}} {
						answers := map[sluice.Cause]string{}
						for _, x := range fallbacks {
							if slices.Contains(f.routes, x.Route) {
								answers[x.Cause] = FallbackAnswer(x)
							}
						}
						fall, err := mk(answers)
						if err != nil {
							return Setup{}, err
						}
						*f.opts = append(*f.opts, sluice.WithFallback(fall))
					}
					fallbacks = nil
				}
				ga, err := sluice.New(append(fa, sluice.With(counter, fw), sluice.WithClock(clock))...)
				if err != nil {
					return Setup{}, err
				}
				b, err := breaker.New("b")
				if err != nil {
					return Setup{}, err
				}
				b.ForceOpen()
				gb, err := sluice.New(append(fb, sluice.With(b), sluice.WithClock(clock))...)
				if err != nil {
					return Setup{}, err
				}
				return Setup{Clock: clock, Counter: counter,
					Fallbacks: fallbacks,
					Routes: func(p func(string) string) (*middleware.Routes, error) {
						return middleware.NewRoutes(middleware.RouteTo(p("a"), ga), middleware.RouteTo(p("b"), gb))
					}}, nil
			},
			Steps: []Step{
				{Route: "a", Want: admitted.withQuota("ratelimit/a", 1, 60, 0, 60).counted(sluice.Success)},
				{Route: "a", Want: Result{Fallback: "a rate-limited"}.counted(sluice.Released)},
				{Route: "b", Want: Result{Fallback: "* circuit-open"}},
				// A rejection the handler's call met: the route's fallback
				// for its cause answers, with the fields of the quota the
				// request spent.
				{Route: "a", Advance: time.Minute, Handler: Rejected, Met: metOpen,
					Want: Result{Ran: true, Fallback: "* circuit-open"}.withQuota("ratelimit/a", 1, 60, 0, 60).counted(sluice.Ignored)},
				{Route: "a", Advance: time.Minute, Handler: RejectedWrapped, Met: metLimited,
					Want: Result{Ran: true, Fallback: "a rate-limited"}.withQuota("ratelimit/a", 1, 60, 0, 60).counted(sluice.Ignored)},
				{Route: "a", Advance: time.Minute, Handler: Rejected, Met: sluice.Decision{Policy: "shed", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrOverloaded},
					Want: Result{Ran: true, Cause: sluice.CauseOverloaded, RetryAfter: 1}.withQuota("ratelimit/a", 1, 60, 0, 60).counted(sluice.Ignored)},
			},
		},
		{
			Name: "a route entry naming a method guards that method's requests only",
			Setup: func(clock *sluice.ManualClock, mk MakeFallback) (Setup, error) {
				guard := func(name string) (*sluice.Guard, error) {
					fw, err := ratelimit.NewFixedWindow(1, time.Minute, ratelimit.WithName(name))
					if err != nil {
						return nil, err
					}
					return sluice.New(sluice.With(fw), sluice.WithClock(clock))
				}
				post, err := guard("ratelimit/post-a")
				if err != nil {
					return Setup{}, err
				}
				get, err := guard("ratelimit/a")
				if err != nil {
					return Setup{}, err
				}
				return Setup{Clock: clock, Routes: func(p func(string) string) (*middleware.Routes, error) {
					return middleware.NewRoutes(middleware.RouteTo(p("POST a"), post), middleware.RouteTo(p("a"), get))
				}}, nil
			},
			Steps: []Step{
				{Method: http.MethodPost, Route: "a", Want: admitted.withQuota("ratelimit/post-a", 1, 60, 0, 60)},
				{Method: http.MethodPost, Route: "a", Want: limited(60).withQuota("ratelimit/post-a", 1, 60, 0, 60)},
				{Route: "a", Want: admitted.withQuota("ratelimit/a", 1, 60, 0, 60)},
				{Route: "a", Want: limited(60).withQuota("ratelimit/a", 1, 60, 0, 60)},
				{Method: http.MethodPost, Route: "b", Want: admitted},
				{Method: http.MethodPost, Route: "a", Advance: time.Minute, Want: admitted.withQuota("ratelimit/post-a", 1, 60, 0, 60)},
			},
		},
	}
}
