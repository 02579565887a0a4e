package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	fsratelimiter "github.com/failsafe-go/failsafe-go/ratelimiter"
	zerobreaker "github.com/zeromicro/go-zero/core/breaker"
	"github.com/zeromicro/go-zero/core/load"
	"github.com/zeromicro/go-zero/core/logx"
	xrate "golang.org/x/time/rate"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/middleware"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/ratelimit"
)

// okHandler is the protected handler: it sets a content type and writes a
// short body, as a small JSON endpoint does.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`)
})

// limiterBreakerGuard is the Guard of the HTTP benchmarks: a token bucket far
// above the request rate of the run, then a breaker, so that both policies
// decide on every request and neither rejects.
func limiterBreakerGuard(tb testing.TB) *sluice.Guard {
	tb.Helper()
	tbk, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1_000_000_000), 1_000_000_000, ratelimit.WithName("ratelimit/api"))
	if err != nil {
		tb.Fatal(err)
	}
	br, err := breaker.New("api")
	if err != nil {
		tb.Fatal(err)
	}
	g, err := sluice.New(sluice.With(tbk, br))
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

// keyedByIP returns a Guard with a token bucket per client address (far
// above the run's rate) and a breaker, and the Keyer that keys requests by
// their peer address.
func keyedByIP(tb testing.TB) (*sluice.Guard, *middleware.Keyer) {
	tb.Helper()
	ipx, err := middleware.NewIPExtractor()
	if err != nil {
		tb.Fatal(err)
	}
	keyer, err := middleware.NewKeyer(middleware.MissingKey{}, middleware.KeyByIP(ipx))
	if err != nil {
		tb.Fatal(err)
	}
	keyed, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewTokenBucket(ratelimit.PerSecond(1_000_000_000), 1_000_000_000)
	})
	if err != nil {
		tb.Fatal(err)
	}
	br, err := breaker.New("api-keyed")
	if err != nil {
		tb.Fatal(err)
	}
	g, err := sluice.New(sluice.With(keyed, br))
	if err != nil {
		tb.Fatal(err)
	}
	return g, keyer
}

// httpHandlers returns the handlers compared: the bare handler and the same
// handler behind each library's middleware with a rate limiter and a breaker
// (go-zero: its breaker and load-shedding handlers, as rest.Server chains
// them; xrate-handwritten: an x/time/rate Limiter in a few lines of
// middleware, the baseline a user weighs a library against).
func httpHandlers(tb testing.TB) []struct {
	name string
	h    http.Handler
} {
	g := limiterBreakerGuard(tb)
	kg, keyer := keyedByIP(tb)

	logx.Disable()
	zero := zeroBreakerShedding(zerobreaker.NewBreaker(), load.NewAdaptiveShedder(), okHandler)

	fs := failsafehttp.NewHandler(okHandler,
		fsratelimiter.NewSmooth[*http.Response](1_000_000_000, time.Second),
		circuitbreaker.NewWithDefaults[*http.Response]())

	return []struct {
		name string
		h    http.Handler
	}{
		{"bare", okHandler},
		{"sluice", httpMW(tb, sluicehttp.WithGuard(g))(okHandler)},
		{"sluice-quiet", httpMW(tb, sluicehttp.WithGuard(g),
			sluicehttp.WithRenderer(middleware.Renderer{QuietAdmitted: true}))(okHandler)},
		{"sluice-keyed-ip", httpMW(tb, sluicehttp.WithGuard(kg), sluicehttp.WithKeyer(keyer))(okHandler)},
		{"xrate-handwritten", xrateMiddleware(xrate.NewLimiter(xrate.Limit(1_000_000_000), 1_000_000_000), okHandler)},
		{"go-zero", zero},
		{"failsafehttp", fs},
	}
}

// xrateMiddleware is the middleware a user writes by hand around an
// x/time/rate Limiter: one Allow per request, 429 with Retry-After when it
// refuses.
func xrateMiddleware(l *xrate.Limiter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !l.Allow() {
			w.Header().Set("Retry-After", "1")
			http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// zeroBreakerShedding guards next with go-zero's breaker and adaptive load
// shedder the way go-zero's rest BreakerHandler and SheddingHandler do: ask
// both, run the handler behind a status-recording writer, and report 5xx to
// the breaker and 503 to the shedder. (go-zero's rest/handler package itself
// pulls OpenTelemetry exporters and grpc-gateway into the build, which this
// module does not carry; its core primitives are what those handlers cost.)
func zeroBreakerShedding(brk zerobreaker.Breaker, shedder load.Shedder, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bp, err := brk.Allow()
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		sp, err := shedder.Allow()
		if err != nil {
			bp.Accept()
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		cw := &codeWriter{ResponseWriter: w, code: http.StatusOK}
		defer func() {
			if cw.code == http.StatusServiceUnavailable {
				sp.Fail()
			} else {
				sp.Pass()
			}
			if cw.code >= http.StatusInternalServerError {
				bp.Reject("status " + http.StatusText(cw.code))
			} else {
				bp.Accept()
			}
		}()
		next.ServeHTTP(cw, r)
	})
}

type codeWriter struct {
	http.ResponseWriter
	code int
}

func (w *codeWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// BenchmarkHTTP measures one GET through each middleware under httptest, a
// fresh ResponseRecorder per request. "sluice" sends the RateLimit fields on
// every response; "sluice-quiet" leaves them to rejections; "sluice-keyed-ip"
// limits per client address.
func BenchmarkHTTP(b *testing.B) {
	for _, c := range httpHandlers(b) {
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			b.ReportAllocs()
			for b.Loop() {
				c.h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				for pb.Next() {
					c.h.ServeHTTP(httptest.NewRecorder(), req)
				}
			})
		})
	}
}

// reusedWriter is a ResponseWriter whose header map is cleared and reused
// between requests, so that what is measured is the middleware rather than
// the recorder's allocations and the collector's work on them.
type reusedWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *reusedWriter) Header() http.Header { return w.h }
func (w *reusedWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *reusedWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	return len(b), nil
}
func (w *reusedWriter) WriteString(s string) (int, error) {
	w.n += len(s)
	return len(s), nil
}
func (w *reusedWriter) reset() {
	clear(w.h)
	w.code, w.n = 0, 0
}

// BenchmarkHTTPOverhead measures the same handlers with a reused writer:
// the difference from "bare" is the middleware's own cost.
func BenchmarkHTTPOverhead(b *testing.B) {
	for _, c := range httpHandlers(b) {
		b.Run(c.name, func(b *testing.B) { serveReused(b, c.h) })
	}
}

// serveReused serves GET / with h to a reusedWriter, b.N times.
func serveReused(b *testing.B, h http.Handler) {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	w := &reusedWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		h.ServeHTTP(w, req)
	}
}

// freshWriter is the writer a server hands each request: one of its own,
// with a header map of its own, as net/http's response has.
type freshWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *freshWriter) Header() http.Header { return w.h }
func (w *freshWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *freshWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	return len(b), nil
}
func (w *freshWriter) WriteString(s string) (int, error) {
	w.n += len(s)
	return len(s), nil
}

// serverRequest is GET / with the chain of contexts net/http gives a
// request: the server's and the connection's values over a cancelable
// context, and a cancelable one of its own, which a middleware that reads
// its context walks.
func serverRequest() *http.Request {
	ctx, cancel := context.WithCancel(context.Background())
	_ = cancel // lives as long as the benchmark
	ctx = context.WithValue(ctx, http.ServerContextKey, &http.Server{})
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
	ctx, cancel = context.WithCancel(ctx)
	_ = cancel
	return httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
}

// BenchmarkHTTPFreshOverhead serves GET / with a fresh writer per request,
// as a server does, through the bare handler, the hand-written x/time/rate
// middleware, and sluice's with and without the RateLimit fields on
// admitted responses, for a request with the contexts a server gives it (token bucket and breaker, defaults). The four
// alternate in batches within one loop, so that all meet the same spells
// of a shared machine. It reports each middleware's time over the bare
// handler a request (ns/req), sluice's as a multiple of the hand-written
// one's, and the allocations each adds to the bare handler's.
func BenchmarkHTTPFreshOverhead(b *testing.B) {
	byName := map[string]http.Handler{}
	for _, c := range httpHandlers(b) {
		byName[c.name] = c.h
	}
	names := []string{"bare", "xrate-handwritten", "sluice", "sluice-quiet"}
	hs := make([]http.Handler, len(names))
	for i, n := range names {
		hs[i] = byName[n]
	}
	req := serverRequest()
	serve := func(h http.Handler) { h.ServeHTTP(&freshWriter{h: http.Header{}}, req) }
	allocs := make([]float64, len(hs))
	for i, h := range hs {
		allocs[i] = testing.AllocsPerRun(100, func() { serve(h) })
	}
	fns := make([]func(), len(hs))
	for i, h := range hs {
		fns[i] = func() { serve(h) }
	}
	const batch = 64
	spent := alternate(b, batch, fns...)
	over := func(i int) float64 { return float64(spent[i]-spent[0]) / float64(b.N*batch) }
	for i, n := range names[1:] {
		b.ReportMetric(over(i+1), n+"-ns/req")
		b.ReportMetric(allocs[i+1]-allocs[0], n+"-allocs/req")
	}
	b.ReportMetric(over(2)/over(1), "sluice/xrate")
	b.ReportMetric(over(3)/over(1), "sluice-quiet/xrate")
}

// TestHTTPHandlersAnswer keeps the benchmark's set-up honest: every handler
// admits and answers 200.
func TestHTTPHandlersAnswer(t *testing.T) {
	for _, c := range httpHandlers(t) {
		rec := httptest.NewRecorder()
		c.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != http.StatusOK || rec.Body.String() != `{"ok":true}` {
			t.Errorf("%s: %d %q", c.name, rec.Code, rec.Body.String())
		}
	}
}

// httpMW is sluicehttp.Middleware(opts...), which must not fail.
func httpMW(tb testing.TB, opts ...sluicehttp.Option) func(http.Handler) http.Handler {
	tb.Helper()
	m, err := sluicehttp.Middleware(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}
