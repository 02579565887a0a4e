package sluiceecho

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/middleware/internal/routing"
	"github.com/sluice-go/sluice/middleware/internal/scenario"
	"github.com/sluice-go/sluice/middleware/internal/sfv"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
	"github.com/sluice-go/sluice/ratelimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newGuard(t *testing.T, ps ...sluice.Policy) *sluice.Guard {
	t.Helper()
	g, err := sluice.New(sluice.With(ps...), sluice.WithClock(sluice.NewManualClock(0)))
	require.NoError(t, err)
	return g
}

func do(e *echo.Echo, method, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

// echoPattern maps a scenario route name ("a", "POST a") to its route
// table entry: Echo's route path, after the method when it names one.
func echoPattern(name string) string {
	method, route := scenario.SplitRoute(name)
	if method == "" {
		return "/" + route
	}
	return method + " /" + route
}

// echoTarget serves the shared scenarios through Middleware on an Echo with
// a GET and a POST route per scenario route name. A handler returns a
// rejection its call met.
func echoTarget(t *testing.T, s scenario.Setup) func(scenario.Step) scenario.Result {
	rs, err := s.Routes(echoPattern)
	require.NoError(t, err)
	skip := map[string]bool{}
	for _, n := range s.Skip {
		skip["/"+n] = true
	}
	e := echo.New()
	opts := []Option{WithRoutes(rs), WithSkipper(func(c echo.Context) bool { return skip[c.Path()] })}
	if s.Keyer != nil {
		opts = append(opts, WithKeyer(s.Keyer))
	}
	if s.RouteResource {
		opts = append(opts, WithRouteResource())
	}
	require.Empty(t, s.Fallbacks, "the Guards declare the fallbacks")
	e.Use(mw(t, opts...))
	for _, name := range []string{"a", "b", "health"} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			e.Add(method, "/"+name, func(c echo.Context) error {
				switch h, err := scenario.Act(c.Request().Context()); h {
				case scenario.ClientError:
					return echo.NewHTTPError(http.StatusBadRequest, "bad")
				case scenario.ServerError:
					return errors.New("database down")
				case scenario.ClientGone:
					return echo.NewHTTPError(http.StatusBadGateway, "upstream call cancelled")
				case scenario.Rejected, scenario.RejectedWrapped:
					return err
				}
				return c.String(http.StatusOK, "ok")
			})
		}
	}
	var serve func(scenario.Step) scenario.Result
	serve = func(st scenario.Step) scenario.Result {
		ctx, call := scenario.NewCall(context.Background(), st, serve)
		defer call.End()
		req := scenario.HTTPRequest(ctx, st)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		res, err := scenario.FromHTTP(call.Ran(), rec.Code, rec.Header(), rec.Body.Bytes())
		require.NoError(t, err)
		return call.Result(res)
	}
	return serve
}

// mw is Middleware(opts...), which must not fail.
func mw(t testing.TB, opts ...Option) echo.MiddlewareFunc {
	t.Helper()
	m, err := Middleware(opts...)
	require.NoError(t, err)
	return m
}

// answering is a fallback handler answering 200 and body.
func answering(body string) degrade.Func[http.Handler] {
	return degrade.Value[http.Handler](http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, body)
	}))
}

// echoFallback makes the Guard fallbacks of the scenarios.
func echoFallback(answers map[sluice.Cause]string) (sluice.Fallback, error) {
	var rules []degrade.Rule[http.Handler]
	for cause, text := range answers {
		switch cause {
		case sluice.CauseRateLimited:
			rules = append(rules, degrade.OnRateLimited(answering(text)))
		case sluice.CauseCircuitOpen:
			rules = append(rules, degrade.OnCircuitOpen(answering(text)))
		case sluice.CauseNone:
			rules = append(rules, degrade.OnRejected(answering(text)))
		default:
			return nil, fmt.Errorf("no rule for %v", cause)
		}
	}
	return degrade.New(rules...)
}

func TestScenarios(t *testing.T) { scenario.RunWith(t, echoTarget, echoFallback) }

func TestRejectionFieldsPerCause(t *testing.T) {
	for _, tt := range []struct {
		d      sluice.Decision
		status int
		retry  string
	}{
		{sluice.Decision{Policy: "ratelimit/x", Limit: 10, RetryAfter: 1500 * time.Millisecond, Reset: 9 * time.Second, Cause: sluice.ErrRateLimited}, 429, "2"},
		{sluice.Decision{Policy: "breaker/x", Limit: -1, RetryAfter: 20 * time.Second, Cause: sluice.ErrCircuitOpen}, 503, "20"},
		{sluice.Decision{Policy: "adaptive/x", Limit: -1, Cause: sluice.ErrOverloaded}, 503, "1"},
		{sluice.Decision{Policy: "adaptive/c", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrConcurrencyLimited}, 503, "1"},
	} {
		e := echo.New()
		e.Use(mw(t, WithGuard(newGuard(t, testpolicy.Rejecter{D: tt.d}))))
		e.GET("/", func(c echo.Context) error { return c.NoContent(200) })
		rec := do(e, http.MethodGet, "/")
		assert.Equal(t, tt.status, rec.Code)
		assert.Equal(t, tt.retry, rec.Header().Get("Retry-After"))
		assert.Equal(t, routing.ProblemContentType, rec.Header().Get("Content-Type"))
		var p map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
		assert.Equal(t, routing.DefaultProblemTypeBase+sluice.CauseOf(tt.d.Cause).String(), p["type"])
		assert.NotContains(t, rec.Body.String(), tt.d.Cause.Error())
		if tt.d.Limit < 0 {
			assert.Empty(t, rec.Header().Get("RateLimit"))
			continue
		}
		rl, err := sfv.ParseList(rec.Header().Get("RateLimit"))
		require.NoError(t, err)
		tp, _ := rl[0].Int("t")
		ra, _ := strconv.ParseInt(rec.Header().Get("Retry-After"), 10, 64)
		assert.GreaterOrEqual(t, ra, tp)
		pol, err := sfv.ParseList(rec.Header().Get("RateLimit-Policy"))
		require.NoError(t, err)
		q, _ := pol[0].Int("q")
		assert.EqualValues(t, 10, q)
	}
}

func TestAdmittedFields(t *testing.T) {
	fw, err := ratelimit.NewFixedWindow(5, time.Minute, ratelimit.WithName("ratelimit/api"))
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithGuard(newGuard(t, fw)), WithRenderer(middleware.Renderer{Legacy: true})))
	e.GET("/", func(c echo.Context) error { return c.NoContent(200) })
	rec := do(e, http.MethodGet, "/")
	assert.Equal(t, `"ratelimit/api";q=5;w=60`, rec.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"ratelimit/api";r=4;t=60`, rec.Header().Get("RateLimit"))
	assert.Equal(t, "4", rec.Header().Get("X-RateLimit-Remaining"))
}

func TestClassificationFromFinalStatus(t *testing.T) {
	for _, tt := range []struct {
		name    string
		handler echo.HandlerFunc
		want    sluice.Outcome
	}{
		{"ok", func(c echo.Context) error { return c.NoContent(200) }, sluice.Success},
		{"nothing written", func(echo.Context) error { return nil }, sluice.Success},
		{"written 503", func(c echo.Context) error { return c.NoContent(503) }, sluice.Failure},
		{"HTTPError 404", func(echo.Context) error { return echo.ErrNotFound }, sluice.Ignored},
		{"HTTPError 502", func(echo.Context) error { return echo.NewHTTPError(502) }, sluice.Failure},
		// Echo's default error handler answers a wrapped HTTPError with a 500:
		// that is the status the client sees.
		{"wrapped HTTPError 429", func(echo.Context) error {
			return errors.Join(errors.New("x"), echo.ErrTooManyRequests)
		}, sluice.Failure},
		// The client is still there: the 500 Echo answers decides, as in
		// net/http (TestHandlersOwnCanceledIsClassifiedByItsStatus).
		{"own Canceled", func(echo.Context) error { return context.Canceled }, sluice.Failure},
		{"plain error", func(echo.Context) error { return errors.New("boom") }, sluice.Failure},
		{"committed 200 then error", func(c echo.Context) error {
			_ = c.String(200, "partial")
			return errors.New("late")
		}, sluice.Success},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := testpolicy.NewCounter()
			e := echo.New()
			e.Use(mw(t, WithGuard(newGuard(t, c))))
			e.GET("/", tt.handler)
			do(e, http.MethodGet, "/")
			assert.Equal(t, map[sluice.Outcome]int{tt.want: 1}, c.Outcomes())
		})
	}
}

func TestServerErrorsTripTheBreakerClientErrorsDoNot(t *testing.T) {
	b, err := breaker.New("api", breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(time.Minute))
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithGuard(newGuard(t, b))))
	code := http.StatusForbidden
	e.GET("/", func(echo.Context) error { return echo.NewHTTPError(code) })
	for range 5 {
		assert.Equal(t, http.StatusForbidden, do(e, http.MethodGet, "/").Code)
	}
	code = http.StatusInternalServerError
	for range 2 {
		assert.Equal(t, http.StatusInternalServerError, do(e, http.MethodGet, "/").Code)
	}
	rec := do(e, http.MethodGet, "/")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "60", rec.Header().Get("Retry-After"))
}

func TestRoutesByPathAndPassThrough(t *testing.T) {
	g := newGuard(t, testpolicy.Rejecter{D: sluice.Decision{Policy: "p", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrOverloaded}})
	rs, err := middleware.NewRoutes(middleware.RouteTo("/items/:id", g))
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithRoutes(rs)))
	e.GET("/items/:id", func(c echo.Context) error { return c.NoContent(200) })
	e.GET("/other", func(c echo.Context) error { return c.NoContent(200) })
	assert.Equal(t, 503, do(e, http.MethodGet, "/items/3").Code)
	assert.Equal(t, 200, do(e, http.MethodGet, "/other").Code)

	_, err = Middleware()
	assert.ErrorContains(t, err, "sluiceecho: no Guard", "no option: nothing guarded")
}

func TestDenyHandlerAndMissingKey(t *testing.T) {
	g := newGuard(t, testpolicy.Rejecter{D: sluice.Decision{Policy: "p", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrOverloaded}})
	e := echo.New()
	var seen sluice.Decision
	e.Use(mw(t, WithGuard(g), WithDenyHandler(func(c echo.Context, d sluice.Decision) error {
		seen = d
		return c.String(http.StatusTeapot, "later")
	})))
	e.GET("/", func(c echo.Context) error { return c.NoContent(200) })
	rec := do(e, http.MethodGet, "/")
	assert.Equal(t, http.StatusTeapot, rec.Code)
	assert.Equal(t, "p", seen.Policy)
	assert.ErrorIs(t, seen.Cause, sluice.ErrOverloaded)

	k, err := middleware.NewKeyer(middleware.RejectMissingKey(), middleware.KeyByCookie("session"))
	require.NoError(t, err)
	c := testpolicy.NewCounter()
	e = echo.New()
	e.Use(mw(t, WithGuard(newGuard(t, c)), WithKeyer(k)))
	var key, resource string
	e.GET("/r/:id", func(c echo.Context) error {
		key, _ = sluice.KeyFrom(c.Request().Context())
		resource, _ = sluice.ResourceFrom(c.Request().Context())
		return c.NoContent(200)
	})
	assert.Equal(t, http.StatusBadRequest, do(e, http.MethodGet, "/r/1").Code)
	req := httptest.NewRequest(http.MethodGet, "/r/1", nil)
	req.AddCookie(&http.Cookie{Name: "session", Value: "s-42"})
	rec = httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	assert.Equal(t, 200, rec.Code)
	assert.Equal(t, "s-42", key)
	assert.Equal(t, "/r/:id", resource)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Success: 1}, c.Outcomes())
}

func TestInnerRejectionDoesNotCountForOuterGuard(t *testing.T) {
	outer := testpolicy.NewCounter()
	inner := newGuard(t, testpolicy.Rejecter{D: sluice.Decision{Policy: "b", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen}})
	e := echo.New()
	e.Use(mw(t, WithGuard(newGuard(t, outer))))
	e.GET("/", func(c echo.Context) error { return c.NoContent(200) }, mw(t, WithGuard(inner)))
	assert.Equal(t, 503, do(e, http.MethodGet, "/").Code)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, outer.Outcomes())

	// Answered by the inner deny handler, it counts for nothing either.
	deny := func(c echo.Context, _ sluice.Decision) error { return c.String(http.StatusServiceUnavailable, "busy") }
	e.GET("/deny", func(c echo.Context) error { return c.NoContent(200) }, mw(t, WithGuard(inner), WithDenyHandler(deny)))
	assert.Equal(t, 503, do(e, http.MethodGet, "/deny").Code)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 2}, outer.Outcomes())

	// A handler's own problem answer is no rejection: its 503 is a failure.
	e.GET("/own", func(c echo.Context) error {
		c.Response().Header().Set("Content-Type", "application/problem+json")
		return c.String(http.StatusServiceUnavailable, "{}")
	})
	assert.Equal(t, 503, do(e, http.MethodGet, "/own").Code)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 2, sluice.Failure: 1}, outer.Outcomes())
}

// A Guard's call timeout (sluice.WithTimeout) applies to the handler, as in
// the net/http adapter: its request's context ends at the deadline, and
// what it then answers is classified as usual. An outer middleware sees the
// request as it was, not the ended context of the deadline, so it does not
// take the answer for a client that went away.
func TestGuardTimeoutEndsTheHandlersContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		outer, inner := testpolicy.NewCounter(), testpolicy.NewCounter()
		g, err := sluice.New(sluice.With(inner), sluice.WithClock(monoclock.New()), sluice.WithTimeout(150*time.Millisecond))
		require.NoError(t, err)
		defer g.Close()
		var waited time.Duration
		wait := func(c echo.Context) error {
			start := time.Now()
			select {
			case <-c.Request().Context().Done():
			case <-time.After(time.Hour):
			}
			waited = time.Since(start)
			return c.Request().Context().Err()
		}
		e := echo.New()
		e.Use(mw(t, WithGuard(newGuard(t, outer))))
		e.GET("/slow", wait, mw(t, WithGuard(g)))
		e.GET("/gateway", func(c echo.Context) error {
			if err := wait(c); err != nil {
				return echo.NewHTTPError(http.StatusGatewayTimeout).SetInternal(err)
			}
			return nil
		}, mw(t, WithGuard(g)))
		e.GET("/fast", func(c echo.Context) error {
			if err := c.Request().Context().Err(); err != nil {
				return err
			}
			return c.String(http.StatusOK, "ok")
		}, mw(t, WithGuard(g)))

		assert.Equal(t, http.StatusInternalServerError, do(e, http.MethodGet, "/slow").Code, "the handler's context error")
		assert.Equal(t, 150*time.Millisecond, waited)
		assert.Equal(t, http.StatusGatewayTimeout, do(e, http.MethodGet, "/gateway").Code)
		assert.Equal(t, 150*time.Millisecond, waited)
		assert.Equal(t, http.StatusOK, do(e, http.MethodGet, "/fast").Code)
		want := map[sluice.Outcome]int{sluice.Failure: 2, sluice.Success: 1}
		assert.Equal(t, want, inner.Outcomes())
		assert.Equal(t, want, outer.Outcomes(), "the outer guard saw the deadline as a client gone")
	})
}

func TestPanicIsAFailure(t *testing.T) {
	c := testpolicy.NewCounter()
	e := echo.New()
	e.Use(mw(t, WithGuard(newGuard(t, c))))
	e.GET("/", func(echo.Context) error { panic("boom") })
	assert.PanicsWithValue(t, "boom", func() { do(e, http.MethodGet, "/") })
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, c.Outcomes())
}

func TestHijackAndFlushThroughMiddleware(t *testing.T) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(mw(t, WithGuard(newGuard(t, testpolicy.NewCounter()))))
	release := make(chan struct{})
	e.GET("/stream", func(c echo.Context) error {
		c.Response().WriteHeader(200)
		_, _ = io.WriteString(c.Response(), "first\n")
		c.Response().Flush()
		<-release
		_, _ = io.WriteString(c.Response(), "second\n")
		return nil
	})
	e.GET("/hijack", func(c echo.Context) error {
		conn, brw, err := http.NewResponseController(c.Response()).Hijack()
		if err != nil {
			return err
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\nhi\n")
		return brw.Flush()
	})
	srv := httptest.NewServer(e)
	defer srv.Close()

	resp, err := srv.Client().Get(srv.URL + "/stream")
	require.NoError(t, err)
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "first\n", line)
	close(release)
	rest, _ := io.ReadAll(br)
	assert.Equal(t, "second\n", string(rest))
	_ = resp.Body.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /hijack HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
	cr := bufio.NewReader(conn)
	hr, err := http.ReadResponse(cr, nil)
	require.NoError(t, err)
	assert.Equal(t, 101, hr.StatusCode)
	line, err = cr.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "hi\n", line)
}

func TestHotPathAllocations(t *testing.T) {
	fw, err := ratelimit.NewFixedWindow(1<<30, time.Hour, ratelimit.WithName("ratelimit/api"))
	require.NoError(t, err)
	b, err := breaker.New("api")
	require.NoError(t, err)
	g := newGuard(t, fw, b)
	e := echo.New()
	e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, mw(t, WithGuard(g)))
	e.GET("/quiet", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) },
		mw(t, WithGuard(g), WithRenderer(middleware.Renderer{QuietAdmitted: true})))
	// Echo chains middleware on every request, which costs each middleware a
	// closure: the baseline is a middleware that does nothing.
	passThrough := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return next(c) }
	}
	bare := echo.New()
	bare.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, passThrough)

	measure := func(e *echo.Echo, path string) float64 {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		w := &nopWriter{h: http.Header{}}
		return testing.AllocsPerRun(200, func() { e.ServeHTTP(w, req) })
	}
	slack := 0.0
	if raceEnabled {
		slack = 1
	}
	base := measure(bare, "/")
	assert.LessOrEqual(t, measure(e, "/")-base, slack)
	assert.LessOrEqual(t, measure(e, "/quiet")-base, slack)
}

// A flood of rejections allocates nothing of sluice's own: a route's
// problem answer is shared while its rejections agree on the cause and the
// delay, and an outer sluice middleware tells the rejection by its answer's
// header fields, not by a mark in the echo.Context (whose store Echo makes
// afresh for every request: 2 allocations).
func TestRejectionAllocatesNothing(t *testing.T) {
	open, err := breaker.New("dep")
	require.NoError(t, err)
	open.ForceOpen()
	spent, err := ratelimit.NewFixedWindow(1, time.Hour)
	require.NoError(t, err)
	passThrough := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return next(c) }
	}
	measure := func(e *echo.Echo) float64 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		w := &nopWriter{h: http.Header{}}
		return testing.AllocsPerRun(200, func() { e.ServeHTTP(w, req) })
	}
	bare := echo.New()
	bare.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, passThrough)
	base := measure(bare)
	slack := 0.0
	if raceEnabled {
		slack = 1
	}
	for name, p := range map[string]sluice.Policy{
		"open breaker": open,
		"spent limit":  spent,
		"overloaded":   testpolicy.Reject(sluice.ErrOverloaded, time.Second),
	} {
		e := echo.New()
		e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, mw(t, WithGuard(newGuard(t, p))))
		do(e, http.MethodGet, "/") // spends the limit
		require.Contains(t, []int{http.StatusTooManyRequests, http.StatusServiceUnavailable}, do(e, http.MethodGet, "/").Code, name)
		assert.LessOrEqual(t, measure(e)-base, slack, name)
	}
}

// nopWriter is a ResponseWriter that keeps nothing.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

func TestRouteResourceGivesEachRouteItsBreaker(t *testing.T) {
	group, err := breaker.NewGroup("routes", breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(time.Minute))
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithGuard(newGuard(t, group)), WithRouteResource()))
	var resource string
	e.GET("/flaky/:id", func(c echo.Context) error {
		resource, _ = sluice.ResourceFrom(c.Request().Context())
		return echo.NewHTTPError(http.StatusBadGateway)
	})
	e.GET("/fine", func(c echo.Context) error { return c.NoContent(200) })
	for range 2 {
		assert.Equal(t, http.StatusBadGateway, do(e, http.MethodGet, "/flaky/1").Code)
	}
	assert.Equal(t, "/flaky/:id", resource)
	assert.Equal(t, http.StatusServiceUnavailable, do(e, http.MethodGet, "/flaky/2").Code)
	assert.Equal(t, http.StatusOK, do(e, http.MethodGet, "/fine").Code)
}

// A custom error handler that maps a domain error to a 404 is classified by
// the 404 the client sees, not as a 500.
func TestClassificationAfterCustomErrorHandler(t *testing.T) {
	errNoSuchUser := errors.New("no such user")
	c := testpolicy.NewCounter()
	e := echo.New()
	mapNotFound(e, errNoSuchUser)
	e.Use(mw(t, WithGuard(newGuard(t, c))))
	e.GET("/", func(echo.Context) error { return errNoSuchUser })
	assert.Equal(t, http.StatusNotFound, do(e, http.MethodGet, "/").Code)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, c.Outcomes())
}

// An inner middleware that puts a context of its own in the request and
// cancels it on return (Echo's ContextTimeout) is no client gone: answers
// are classified as usual.
func TestInnerMiddlewaresCancelledContextIsNotAClientGone(t *testing.T) {
	c := testpolicy.NewCounter()
	e := echo.New()
	e.Use(mw(t, WithGuard(newGuard(t, c))), echomw.ContextTimeout(time.Minute))
	e.GET("/fail", func(echo.Context) error { return errors.New("database down") })
	e.GET("/ok", func(ec echo.Context) error { return ec.String(http.StatusOK, "ok") })
	assert.Equal(t, http.StatusInternalServerError, do(e, http.MethodGet, "/fail").Code)
	assert.Equal(t, http.StatusOK, do(e, http.MethodGet, "/ok").Code)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1, sluice.Success: 1}, c.Outcomes())
}

// A handler that returns context.Canceled of its own (a call it cancelled)
// while its client is still there answers 500: a Failure, as the same 500
// is in net/http. Only a client that went away makes it Ignored.
func TestHandlersOwnCanceledIsClassifiedByItsStatus(t *testing.T) {
	c := testpolicy.NewCounter()
	e := echo.New()
	e.Use(mw(t, WithGuard(newGuard(t, c))))
	e.GET("/", func(echo.Context) error { return fmt.Errorf("lookup: %w", context.Canceled) })
	assert.Equal(t, http.StatusInternalServerError, do(e, http.MethodGet, "/").Code)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, c.Outcomes())

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client went away
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1, sluice.Ignored: 1}, c.Outcomes())
}

// A handler that answers the Guard's deadline with context.Canceled (as some
// drivers do) timed out: a Failure, as the client's 500 says, not a client
// gone.
func TestGuardTimeoutAnsweredWithCanceledIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testpolicy.NewCounter()
		g, err := sluice.New(sluice.With(c), sluice.WithTimeout(100*time.Millisecond))
		require.NoError(t, err)
		defer g.Close()
		e := echo.New()
		e.Use(mw(t, WithGuard(g)))
		e.GET("/", func(ec echo.Context) error {
			<-ec.Request().Context().Done() // the Guard's deadline
			return context.Canceled
		})
		assert.Equal(t, http.StatusInternalServerError, do(e, http.MethodGet, "/").Code)
		assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, c.Outcomes())
	})
}

// Two policies with one name and different windows: the RateLimit-Policy of
// a rejection leaves w out rather than give the other policy's window.
func TestSameNamedPoliciesNeverGetAnothersWindow(t *testing.T) {
	perSecond, err := ratelimit.NewFixedWindow(10, time.Second)
	require.NoError(t, err)
	perHour, err := ratelimit.NewFixedWindow(3, time.Hour)
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithGuard(newGuard(t, perSecond, perHour))))
	e.GET("/", func(ec echo.Context) error { return ec.NoContent(http.StatusNoContent) })
	for range 3 {
		do(e, http.MethodGet, "/")
	}
	rec := do(e, http.MethodGet, "/")
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "3600", rec.Header().Get("Retry-After"))
	pol, err := sfv.ParseList(rec.Header().Get("RateLimit-Policy"))
	require.NoError(t, err)
	require.Len(t, pol, 1)
	q, _ := pol[0].Int("q")
	assert.EqualValues(t, 3, q)
	if w, ok := pol[0].Int("w"); ok { // w may be left out when unknown, never wrong
		assert.EqualValues(t, 3600, w, "RateLimit-Policy: %s", rec.Header().Get("RateLimit-Policy"))
	}
}

// A handler that returns a rejection its own call met (its dependency's
// breaker open) gets it answered as the middleware's own: 503 with
// Retry-After and the problem body, not Echo's 500; the route's Guard
// counts it Ignored. A response already committed is left alone.
func TestHandlerReturningARejectionIsAnsweredAsOne(t *testing.T) {
	counter := testpolicy.NewCounter()
	dep := newGuard(t, testpolicy.Rejecter{D: sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: 3 * time.Second, Cause: sluice.ErrCircuitOpen}})
	e := echo.New()
	e.Use(mw(t, WithGuard(newGuard(t, counter))))
	e.GET("/prices", func(c echo.Context) error {
		return fmt.Errorf("prices: %w", dep.Do(c.Request().Context(), func(context.Context) error { return nil }))
	})
	e.GET("/late", func(c echo.Context) error {
		_ = c.String(http.StatusAccepted, "begun")
		return dep.Do(c.Request().Context(), func(context.Context) error { return nil })
	})
	rec := do(e, http.MethodGet, "/prices")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "3", rec.Header().Get("Retry-After"))
	assert.Equal(t, routing.ProblemContentType, rec.Header().Get("Content-Type"))
	assert.NotContains(t, rec.Body.String(), "prices:", "no error text on the wire")
	rec = do(e, http.MethodGet, "/late")
	assert.Equal(t, http.StatusAccepted, rec.Code)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 2}, counter.Outcomes())
}

// An *echo.HTTPError carries the status the handler chose; a rejection kept
// as its Internal (for the logs) does not replace it.
func TestHandlersHTTPErrorKeepsItsCodeOverAnInternalRejection(t *testing.T) {
	counter := testpolicy.NewCounter()
	dep := newGuard(t, testpolicy.Rejecter{D: sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: 3 * time.Second, Cause: sluice.ErrCircuitOpen}})
	e := echo.New()
	e.Use(mw(t, WithGuard(newGuard(t, counter))))
	e.GET("/prices", func(c echo.Context) error {
		err := dep.Do(c.Request().Context(), func(context.Context) error { return nil })
		return echo.NewHTTPError(http.StatusBadGateway, "prices unavailable").SetInternal(err)
	})
	rec := do(e, http.MethodGet, "/prices")
	assert.Equal(t, http.StatusBadGateway, rec.Code)
	assert.Empty(t, rec.Header().Get("Retry-After"))
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, counter.Outcomes(), "a rejection met is no failure of the route")
}

// Under a Guard's call timeout, the deny handler answering a rejection the
// handler returned gets the request's live context, not the deadline's,
// cancelled once the handler returned; so does Echo's error handler.
func TestDenyHandlerAfterGuardTimeoutGetsALiveContext(t *testing.T) {
	dep := newGuard(t, testpolicy.Rejecter{D: sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: time.Second, Cause: sluice.ErrCircuitOpen}})
	g, err := sluice.New(sluice.WithTimeout(time.Minute))
	require.NoError(t, err)
	defer g.Close()
	var denyErr, handlerErr error = errors.New("unset"), errors.New("unset")
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		handlerErr = c.Request().Context().Err()
		_ = c.NoContent(http.StatusInternalServerError)
	}
	e.Use(mw(t, WithGuard(g), WithDenyHandler(func(c echo.Context, d sluice.Decision) error {
		denyErr = c.Request().Context().Err()
		return c.String(http.StatusServiceUnavailable, "later")
	})))
	e.GET("/dep", func(c echo.Context) error {
		return dep.Do(c.Request().Context(), func(context.Context) error { return nil })
	})
	e.GET("/fail", func(c echo.Context) error { return errors.New("boom") })
	assert.Equal(t, http.StatusServiceUnavailable, do(e, http.MethodGet, "/dep").Code)
	assert.NoError(t, denyErr)
	assert.Equal(t, http.StatusInternalServerError, do(e, http.MethodGet, "/fail").Code)
	assert.NoError(t, handlerErr)
}

// A table entry that names the method guards that method's requests alone;
// the path's own entry, the others.
func TestRoutesByMethodAndPath(t *testing.T) {
	post := testpolicy.NewCounter()
	byPath := testpolicy.NewCounter()
	routes, err := middleware.NewRoutes(
		middleware.RouteTo("POST /cart", newGuard(t, post)),
		middleware.RouteTo("/cart", newGuard(t, byPath)))
	require.NoError(t, err)
	var resources []string
	e := echo.New()
	e.Use(mw(t, WithRoutes(routes), WithRouteResource()))
	h := func(c echo.Context) error {
		r, _ := sluice.ResourceFrom(c.Request().Context())
		resources = append(resources, r)
		return c.NoContent(http.StatusOK)
	}
	e.POST("/cart", h)
	e.GET("/cart", h)
	assert.Equal(t, http.StatusOK, do(e, http.MethodPost, "/cart").Code)
	assert.Equal(t, http.StatusOK, do(e, http.MethodGet, "/cart").Code)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Success: 1}, post.Outcomes())
	assert.Equal(t, map[sluice.Outcome]int{sluice.Success: 1}, byPath.Outcomes())
	assert.Equal(t, []string{"POST /cart", "/cart"}, resources)
}

// A route the middleware lets through unguarded (skipped, or not in the
// table) still gets a rejection its handler returns answered as one.
func TestUnguardedHandlerReturningARejection(t *testing.T) {
	dep := newGuard(t, testpolicy.Rejecter{D: sluice.Decision{Policy: "breaker/dep", Limit: -1, RetryAfter: 2 * time.Second, Cause: sluice.ErrCircuitOpen}})
	routes, err := middleware.NewRoutes(middleware.RouteTo("/guarded", newGuard(t)))
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithRoutes(routes), WithSkipper(func(c echo.Context) bool { return c.Path() == "/skipped" })))
	h := func(c echo.Context) error {
		return dep.Do(c.Request().Context(), func(context.Context) error { return nil })
	}
	e.GET("/unlisted", h)
	e.GET("/skipped", h)
	for _, path := range []string{"/unlisted", "/skipped"} {
		rec := do(e, http.MethodGet, path)
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, path)
		assert.Equal(t, "2", rec.Header().Get("Retry-After"), path)
	}
}

type userID int

func (u userID) String() string { return fmt.Sprintf("user-%d", int(u)) }

// KeyByValue keys by what an earlier Echo middleware put in the context.
func TestKeyByValue(t *testing.T) {
	rec := &keyRecorder{}
	k, err := middleware.NewKeyer(middleware.SharedKey("anonymous"), KeyByValue("user"))
	require.NoError(t, err)
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			switch c.QueryParam("as") {
			case "alice":
				c.Set("user", "alice")
			case "7":
				c.Set("user", userID(7))
			case "odd":
				c.Set("user", 7)
			case "nil":
				c.Set("user", (*namedUser)(nil))
			case "named":
				c.Set("user", tenant("acme"))
			}
			return next(c)
		}
	})
	e.Use(mw(t, WithGuard(newGuard(t, rec)), WithKeyer(k)))
	e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	for _, as := range []string{"alice", "7", "odd", "", "nil", "named"} {
		require.Equal(t, http.StatusOK, do(e, http.MethodGet, "/?as="+as).Code)
	}
	assert.Equal(t, []string{"alice", "user-7", "anonymous", "anonymous", "anonymous", "acme"}, rec.keys)
	_, ok := KeyByValue("user")(nil)
	assert.False(t, ok, "outside the middleware")
}

// keyRecorder admits every request and records its key.
type keyRecorder struct{ keys []string }

func (*keyRecorder) Name() string { return "keys" }
func (r *keyRecorder) Admit(ctx context.Context, _ time.Duration) (sluice.Ticket, sluice.Quota, error) {
	k, _ := sluice.KeyFrom(ctx)
	r.keys = append(r.keys, k)
	return 0, sluice.Quota{Limit: -1}, nil
}
func (*keyRecorder) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (*keyRecorder) Needs() sluice.Needs                                              { return 0 }

// A HEAD request to a route Echo serves for GET and HEAD spends the budget
// of the table's "GET path" entry, as under net/http: it runs the same
// handler, and must not bypass its guard.
func TestHeadRequestIsGuardedByTheGetEntry(t *testing.T) {
	get := testpolicy.NewCounter()
	routes, err := middleware.NewRoutes(middleware.RouteTo("GET /items", newGuard(t, get)))
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithRoutes(routes)))
	e.Match([]string{http.MethodGet, http.MethodHead}, "/items", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	assert.Equal(t, http.StatusOK, do(e, http.MethodGet, "/items").Code)
	assert.Equal(t, http.StatusOK, do(e, http.MethodHead, "/items").Code)
	assert.Equal(t, map[sluice.Outcome]int{sluice.Success: 2}, get.Outcomes())
}

type namedUser struct{ name string }

func (u *namedUser) String() string { return u.name }

type tenant string

// The fallbacks of each route's Guard answer its rejections by cause, in
// order; degrade.NewRoutes picks them by route where one Guard serves several
// (a table entry naming the method is the route); a handler returning a
// rejection its own call met gets the same answer; one that none answers
// goes to the deny handler. Every answered rejection counts as Ignored.
func TestFallbackByRouteAndCause(t *testing.T) {
	limited := testpolicy.Reject(sluice.ErrRateLimited, time.Second)
	open := testpolicy.Reject(sluice.ErrCircuitOpen, time.Second)
	counter := testpolicy.NewCounter()
	dep := newGuard(t, open)
	fbs := func(rules ...degrade.Rule[http.Handler]) *degrade.Fallbacks[http.Handler] {
		f, err := degrade.New(rules...)
		require.NoError(t, err)
		return f
	}
	var seen sluice.Decision
	byRoute, err := degrade.NewRoutes(map[string]*degrade.Fallbacks[http.Handler]{
		"/a": fbs(degrade.OnRateLimited(answering("a-limited"))),
		"POST /cart": fbs(degrade.OnRateLimited[http.Handler](func(ctx context.Context, err error) (http.Handler, error) {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen, _ = sluice.RejectionOf(err)
				_, _ = io.WriteString(w, "cart")
			}), nil
		})),
	}, fbs(degrade.OnCircuitOpen(answering("open"))))
	require.NoError(t, err)
	gShared, err := sluice.New(sluice.With(limited), sluice.WithFallback(byRoute))
	require.NoError(t, err)
	gDep, err := sluice.New(sluice.With(counter), sluice.WithFallback(fbs(degrade.OnCircuitOpen(answering("dep open")))))
	require.NoError(t, err)
	routes, err := middleware.NewRoutes(
		middleware.RouteTo("/a", gShared),
		middleware.RouteTo("POST /cart", gShared),
		middleware.RouteTo("/b", gShared),
		middleware.RouteTo("/dep", gDep))
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithRoutes(routes),
		WithDenyHandler(func(c echo.Context, d sluice.Decision) error { return c.String(http.StatusTeapot, "denied") })))
	for _, p := range []string{"/a", "/b"} {
		e.GET(p, func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	}
	e.POST("/cart", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	e.GET("/dep", func(c echo.Context) error {
		return dep.Do(c.Request().Context(), func(context.Context) error { return nil })
	})
	for _, tc := range []struct {
		method, target string
		code           int
		body           string
	}{
		{http.MethodGet, "/a", http.StatusOK, "a-limited"},
		{http.MethodPost, "/cart", http.StatusOK, "cart"},
		{http.MethodGet, "/b", http.StatusTeapot, "denied"},
		{http.MethodGet, "/dep", http.StatusOK, "dep open"},
	} {
		rec := do(e, tc.method, tc.target)
		assert.Equal(t, tc.code, rec.Code, "%s %s", tc.method, tc.target)
		assert.Equal(t, tc.body, rec.Body.String(), "%s %s", tc.method, tc.target)
	}
	assert.Equal(t, "test/reject", seen.Policy, "the handler reads the Decision")
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, counter.Outcomes())
}

// The stale cache, one of the Guard's fallbacks, is fed with the good GET
// responses of the Guard's Echo routes and answers their rejections.
func TestStaleCacheBehindEcho(t *testing.T) {
	clock := sluice.NewManualClock(0)
	b, err := breaker.New("b", breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(time.Minute), breaker.WithClock(clock))
	require.NoError(t, err)
	cache, err := middleware.NewStaleCache(8, time.Minute, 1024)
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(b), sluice.WithClock(clock), sluice.WithFallback(cache))
	require.NoError(t, err)
	fail := false
	e := echo.New()
	e.Use(mw(t, WithGuard(g)))
	e.GET("/p", func(c echo.Context) error {
		if fail {
			return errors.New("down")
		}
		return c.String(http.StatusOK, "prices")
	})
	require.Equal(t, "prices", do(e, http.MethodGet, "/p").Body.String())
	assert.Equal(t, 1, cache.Len())
	fail = true
	// The failure opens the breaker, and the stale copy answers it.
	rec := do(e, http.MethodGet, "/p")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "prices", rec.Body.String())
	assert.Equal(t, "0", rec.Header().Get("Age"))
	clock.Advance(7 * time.Second)
	rec = do(e, http.MethodGet, "/p")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "prices", rec.Body.String())
	assert.Equal(t, "7", rec.Header().Get("Age"))
}

func TestMiddlewareMisconfigurationIsAnError(t *testing.T) {
	g := newGuard(t)
	rs, err := middleware.NewRoutes(middleware.DefaultRoute(g))
	require.NoError(t, err)
	strs, err := degrade.New(degrade.OnRejected(degrade.Value("busy")))
	require.NoError(t, err)
	gStr, err := sluice.New(sluice.WithFallback(strs))
	require.NoError(t, err)
	keyer, err := middleware.NewKeyer(middleware.RejectMissingKey(), middleware.KeyByHeader("X-Key"))
	require.NoError(t, err)
	denyNone := func(echo.Context, sluice.Decision) error { return nil }
	retrying, err := sluice.New(sluice.WithRetry(sluice.Retry{}))
	require.NoError(t, err)
	for name, opts := range map[string][]Option{
		"nil Guard":        {WithGuard(nil)},
		"nil routes":       {WithRoutes(nil)},
		"Guard and routes": {WithGuard(g), WithRoutes(rs)},
		"nil option":       {nil},
		"nil keyer":        {WithKeyer(nil)},
		"nil skipper":      {WithSkipper(nil)},
		"nil deny handler": {WithDenyHandler(nil)},
		"nil classifier":   {WithClassifier(nil)},
		"string fallbacks": {WithGuard(gStr)},
		// Given twice, the second would drop the first in silence.
		"skipper twice":    {WithGuard(g), WithSkipper(echomw.DefaultSkipper), WithSkipper(echomw.DefaultSkipper)},
		"classifier twice": {WithGuard(g), WithClassifier(middleware.ClassifyHTTPStatus), WithClassifier(middleware.ClassifyHTTPStatus)},
		"keyer twice":      {WithGuard(g), WithKeyer(keyer), WithKeyer(keyer)},
		"deny twice":       {WithGuard(g), WithDenyHandler(denyNone), WithDenyHandler(denyNone)},
		"resource twice":   {WithGuard(g), WithRouteResource(), WithRouteResource()},
		"renderer twice":   {WithGuard(g), WithRenderer(middleware.Renderer{}), WithRenderer(middleware.Renderer{})},
		// A handler is never run twice: the retries would do nothing.
		"Guard with retries": {WithGuard(retrying)},
	} {
		m, err := Middleware(opts...)
		assert.Error(t, err, name)
		assert.Nil(t, m, name)
	}
	_, err = Middleware(WithGuard(gStr))
	assert.ErrorContains(t, err, "degrade.New[http.Handler]")
}

// TestCauses plays the causes table through Middleware: each fallback of
// the Guard answers 200 and its text.
func TestCauses(t *testing.T) {
	answer := func(text string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, text) })
	}
	scenario.RunCauses(t, answer, func(t *testing.T, g *sluice.Guard) func(scenario.Work) string {
		e := echo.New()
		e.Use(mw(t, WithGuard(g)))
		e.GET("/a", func(c echo.Context) error {
			switch scenario.WorkFrom(c.Request().Context()) {
			case scenario.Fail:
				return errors.New("down")
			case scenario.Hang:
				<-c.Request().Context().Done()
				return c.Request().Context().Err()
			}
			return c.String(http.StatusOK, "ok")
		})
		return func(w scenario.Work) string { return scenario.ServeWork(e, w) }
	})
}

// onOff rejects with an open circuit while on.
type onOff struct{ on bool }

func (*onOff) Name() string { return "switch" }
func (s *onOff) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if s.on {
		return 0, sluice.Quota{Limit: -1, RetryAfter: time.Second}, sluice.ErrCircuitOpen
	}
	return 0, sluice.Quota{Limit: -1}, nil
}
func (*onOff) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (*onOff) Needs() sluice.Needs                                              { return 0 }

// A GET whose handler hijacks its connection (a WebSocket upgrade) has no
// HTTP response to keep: the stale cache stays empty, and a later rejection
// of the route is answered 503, not with an empty copy.
func TestHijackedGetKeepsNoStaleCopyBehindEcho(t *testing.T) {
	sw := &onOff{}
	cache, err := middleware.NewStaleCache(8, time.Minute, 1024)
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(sw), sluice.WithClock(sluice.NewManualClock(time.Hour)), sluice.WithFallback(cache))
	require.NoError(t, err)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	served := make(chan struct{}, 1)
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // outside sluice's: it has kept its copy, or not
		return func(c echo.Context) error {
			err := next(c)
			if c.Path() == "/ws" {
				served <- struct{}{}
			}
			return err
		}
	})
	e.Use(mw(t, WithGuard(g)))
	e.GET("/ws", func(c echo.Context) error {
		conn, brw, err := http.NewResponseController(c.Response()).Hijack()
		if err != nil {
			return err
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
		return brw.Flush()
	})
	srv := httptest.NewServer(e)
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
	hr, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, hr.StatusCode)
	_, _ = io.Copy(io.Discard, conn) // the handler has closed it
	<-served
	assert.Zero(t, cache.Len(), "a hijacked GET is no response to keep")

	sw.on = true
	rec := do(e, http.MethodGet, "/ws")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Empty(t, rec.Header().Get("Age"))
}

// An inner middleware's fallback answering its handler's failure is, for
// an outer one, an answer in place of the handler: Ignored, and no good
// response for the outer Guard's stale cache.
func TestInnerFailureFallbackIsNoGoodResponseForOuterBehindEcho(t *testing.T) {
	outer := testpolicy.NewCounter()
	cache, err := middleware.NewStaleCache(8, time.Minute, 1024)
	require.NoError(t, err)
	og, err := sluice.New(sluice.With(outer), sluice.WithClock(sluice.NewManualClock(0)), sluice.WithFallback(cache))
	require.NoError(t, err)
	fb, err := degrade.New(degrade.OnError(func(context.Context, error) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "placeholder") }), nil
	}))
	require.NoError(t, err)
	inner := testpolicy.NewCounter()
	ig, err := sluice.New(sluice.With(inner), sluice.WithClock(sluice.NewManualClock(0)), sluice.WithFallback(fb))
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithGuard(og)), mw(t, WithGuard(ig)))
	e.GET("/prices", func(echo.Context) error { return errors.New("down") })
	rec := do(e, http.MethodGet, "/prices")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "placeholder", rec.Body.String())
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, inner.Outcomes())
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, outer.Outcomes())
	assert.Zero(t, cache.Len(), "the inner fallback's answer is not kept as a good response")
}

// A fallback answering a handler's failure goes out without the fields the
// handler set for its own body.
func TestFailureFallbackDropsTheHandlersBodyFields(t *testing.T) {
	fb, err := degrade.New(degrade.OnError(func(context.Context, error) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "placeholder") }), nil
	}))
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(testpolicy.NewCounter()), sluice.WithClock(sluice.NewManualClock(0)), sluice.WithFallback(fb))
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithGuard(g)))
	e.GET("/p", func(c echo.Context) error {
		c.Response().Header().Set("Content-Encoding", "gzip")
		c.Response().Header().Set("Etag", `"v1"`)
		return errors.New("down")
	})
	rec := do(e, http.MethodGet, "/p")
	assert.Equal(t, "placeholder", rec.Body.String())
	assert.Empty(t, rec.Header().Get("Content-Encoding"))
	assert.Empty(t, rec.Header().Get("Etag"))
}

// A rejection the handler met elsewhere (its dependency's limiter) and
// returns describes that limiter's quota: its RateLimit-Policy field does
// not take the window of a policy of the same name (a default name) in the
// route's Guard.
func TestHandlersRejectionNamesNoWindowOfTheRoutesSameNamedPolicy(t *testing.T) {
	own, err := ratelimit.NewFixedWindow(100, time.Minute)
	require.NoError(t, err)
	dep, err := ratelimit.NewFixedWindow(1, time.Second)
	require.NoError(t, err)
	require.Equal(t, own.Name(), dep.Name())
	depGuard := newGuard(t, dep)
	e := echo.New()
	e.Use(mw(t, WithGuard(newGuard(t, own))))
	e.GET("/", func(c echo.Context) error {
		if err := depGuard.Do(c.Request().Context(), func(context.Context) error { return nil }); err != nil {
			return err
		}
		return c.NoContent(http.StatusOK)
	})
	require.Equal(t, http.StatusOK, do(e, http.MethodGet, "/").Code)
	rec := do(e, http.MethodGet, "/")
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, `"ratelimit/fixed-window";q=1`, rec.Header().Get("RateLimit-Policy"))
}

// KeyByValue given an empty name (c.Get(""), which no authentication
// middleware sets) would key no request, every client in the one shared
// bucket: NewKeyer refuses it, alone or in KeyPerRoute.
func TestKeyByValueOfAnEmptyNameIsRefused(t *testing.T) {
	if _, err := middleware.NewKeyer(middleware.MissingKey{}, KeyByValue("")); err == nil {
		t.Error("NewKeyer took KeyByValue(\"\")")
	}
	if _, err := middleware.NewKeyer(middleware.MissingKey{}, middleware.KeyPerRoute(nil, KeyByValue(""))); err == nil {
		t.Error("NewKeyer took KeyPerRoute(nil, KeyByValue(\"\"))")
	}
}

// A classifier (WithClassifier) that panics ends the call first: the
// bulkhead's only slot is given back.
func TestAClassifierThatPanicsEndsTheCall(t *testing.T) {
	bh, err := adaptive.NewBulkhead(1)
	require.NoError(t, err)
	e := echo.New()
	e.Use(mw(t, WithGuard(newGuard(t, bh)), WithClassifier(func(status int) sluice.Outcome {
		if status == http.StatusTeapot {
			panic("classifier bug")
		}
		return sluice.Success
	})))
	e.GET("/teapot", func(c echo.Context) error { return c.NoContent(http.StatusTeapot) })
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	func() {
		defer func() { _ = recover() }()
		do(e, http.MethodGet, "/teapot")
	}()
	assert.Equal(t, http.StatusOK, do(e, http.MethodGet, "/").Code, "the bulkhead's only slot leaked")
}

// counterWithOnError returns a Guard of a counting policy whose OnError
// fallback answers "fallback", closed when t ends, and the policy.
func counterWithOnError(t *testing.T) (*testpolicy.Counter, *sluice.Guard) {
	t.Helper()
	c := testpolicy.NewCounter()
	fb, err := degrade.New(degrade.OnError(answering("fallback")))
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(c), sluice.WithClock(sluice.NewManualClock(0)), sluice.WithFallback(fb))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return c, g
}

// A domain error that the application's own HTTPErrorHandler maps to a 404
// is a 404 whether or not the route's Guard has an OnError fallback: the
// status the client sees decides.
func TestEchoErrorHandlers404IsNoFailureUnderAFallback(t *testing.T) {
	errNoSuchUser := errors.New("no such user")
	c, g := counterWithOnError(t)
	e := echo.New()
	mapNotFound(e, errNoSuchUser)
	e.Use(mw(t, WithGuard(g)))
	e.GET("/", func(echo.Context) error { return errNoSuchUser })
	rec := do(e, http.MethodGet, "/")
	assert.Equal(t, http.StatusNotFound, rec.Code, "body %q", rec.Body.String())
	assert.Equal(t, map[sluice.Outcome]int{sluice.Ignored: 1}, c.Outcomes())
}

// Same with the stale cache: a resource now gone (404 by the app's error
// handler) must not be answered with its stale copy.
func TestEchoErrorHandlers404IsNotAnsweredStale(t *testing.T) {
	errNoSuchUser := errors.New("no such user")
	c := testpolicy.NewCounter()
	cache, err := middleware.NewStaleCache(8, time.Hour, 1024)
	require.NoError(t, err)
	g, err := sluice.New(sluice.With(c), sluice.WithClock(sluice.NewManualClock(time.Hour)), sluice.WithFallback(cache))
	require.NoError(t, err)
	defer g.Close()
	e := echo.New()
	mapNotFound(e, errNoSuchUser)
	deleted := false
	e.Use(mw(t, WithGuard(g)))
	e.GET("/users/:id", func(ec echo.Context) error {
		if deleted {
			return errNoSuchUser
		}
		return ec.String(http.StatusOK, "alice")
	})
	require.Equal(t, http.StatusOK, do(e, http.MethodGet, "/users/1").Code)
	deleted = true
	rec := do(e, http.MethodGet, "/users/1")
	assert.Equal(t, http.StatusNotFound, rec.Code, "body %q", rec.Body.String())
}

// An error Echo's error handler renders as a 5xx is answered by the
// Guard's fallback for that error, and counts as a failure.
func TestEchoErrorHandlers5xxIsAnsweredByTheFallback(t *testing.T) {
	errDB := errors.New("db down")
	c, g := counterWithOnError(t)
	e := echo.New()
	e.Use(mw(t, WithGuard(g)))
	e.GET("/", func(echo.Context) error { return errDB })
	rec := do(e, http.MethodGet, "/")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "fallback", rec.Body.String())
	assert.Equal(t, map[sluice.Outcome]int{sluice.Failure: 1}, c.Outcomes())
}

// Past the Guard's deadline too, a domain error the application maps to a
// 404 is that 404, Ignored, and not the stale copy of the resource now
// deleted (net/http sends a 404 written past the deadline as it is).
func TestEchoErrorHandlers404PastTheDeadlineIsNotAnsweredStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errNoSuchUser := errors.New("no such user")
		c := testpolicy.NewCounter()
		cache, err := middleware.NewStaleCache(8, time.Hour, 1024)
		require.NoError(t, err)
		g, err := sluice.New(sluice.With(c), sluice.WithFallback(cache), sluice.WithTimeout(time.Second))
		require.NoError(t, err)
		defer g.Close()
		e := echo.New()
		mapNotFound(e, errNoSuchUser)
		deleted := false
		e.Use(mw(t, WithGuard(g)))
		e.GET("/users/:id", func(ec echo.Context) error {
			if deleted {
				// A slow lookup that finds the user gone.
				<-ec.Request().Context().Done()
				return errNoSuchUser
			}
			return ec.String(http.StatusOK, "alice")
		})
		require.Equal(t, http.StatusOK, do(e, http.MethodGet, "/users/1").Code)
		require.Equal(t, 1, cache.Len())
		deleted = true
		rec := do(e, http.MethodGet, "/users/1")
		assert.Equal(t, http.StatusNotFound, rec.Code, "a deleted user's stale copy is served: body %q", rec.Body.String())
		assert.Equal(t, map[sluice.Outcome]int{sluice.Success: 1, sluice.Ignored: 1}, c.Outcomes())
	})
}

// mapNotFound gives e the error handler of an application that answers
// errNotFound, a domain error, with 404, and the others as Echo does.
func mapNotFound(e *echo.Echo, errNotFound error) {
	e.HTTPErrorHandler = func(err error, ec echo.Context) {
		if ec.Response().Committed {
			return
		}
		if errors.Is(err, errNotFound) {
			_ = ec.NoContent(http.StatusNotFound)
			return
		}
		e.DefaultHTTPErrorHandler(err, ec)
	}
}
