package sluicehttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/middleware"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/ratelimit"
)

func ExampleMiddleware() {
	clock := sluice.NewManualClock(0)
	limit, err := ratelimit.NewFixedWindow(2, time.Minute, ratelimit.WithName("ratelimit/items"))
	if err != nil {
		panic(err)
	}
	items, err := sluice.New(sluice.With(limit), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	routes, err := middleware.NewRoutes(middleware.RouteTo("GET /items", items))
	if err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /items", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "[]") })
	guard, err := sluicehttp.Middleware(sluicehttp.WithRoutes(routes))
	if err != nil {
		panic(err)
	}
	h := guard(mux)

	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/items", nil))
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
		if ra := rec.Header().Get("Retry-After"); ra != "" {
			fmt.Println("Retry-After:", ra)
		}
	}
	// Output:
	// 200 "ratelimit/items";r=1;t=60
	// 200 "ratelimit/items";r=0;t=60
	// 429 "ratelimit/items";r=0;t=60
	// Retry-After: 60
}

// dependency is a RoundTripper standing for a remote service that is
// overloaded and asks its callers to come back in two minutes.
type dependency struct{ calls int }

func (d *dependency) RoundTrip(r *http.Request) (*http.Response, error) {
	d.calls++
	return &http.Response{
		StatusCode: http.StatusServiceUnavailable,
		Header:     http.Header{"Retry-After": {"120"}},
		Body:       io.NopCloser(strings.NewReader("busy")),
		Request:    r,
	}, nil
}

func ExampleTransport() {
	clock := sluice.NewManualClock(0)
	dep := &dependency{}
	rt, err := sluicehttp.Transport(dep, func(host string) (*sluice.Guard, error) {
		b, err := breaker.New(host, breaker.WithConsecutiveFailures(5))
		if err != nil {
			return nil, err
		}
		return sluice.New(sluice.With(b), sluice.WithClock(clock))
	})
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	client := &http.Client{Transport: rt}

	resp, err := client.Get("http://payments.internal/charge")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)

	// The dependency's Retry-After opened its breaker: the next call is not sent.
	_, err = client.Get("http://payments.internal/charge")
	rej, ok := sluice.RejectionOf(err)
	if !ok {
		fmt.Println("not rejected:", err)
		return
	}
	fmt.Println("rejected:", rej.RetryAfter, dep.calls)
	// Output:
	// 503
	// rejected: 2m0s 1
}

// Fallbacks are declared once, on the Guard, by cause: here a stale copy
// of the route's last good answer first, and a static answer when there is
// none. The middleware serves the Guard's fallbacks that answer an
// http.Handler, and keeps the stale copies of the good GET responses.
func ExampleMiddleware_fallbacks() {
	clock := sluice.NewManualClock(0)
	b, err := breaker.New("catalog", breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(time.Minute))
	if err != nil {
		panic(err)
	}
	stale, err := middleware.NewStaleCache(1000, 10*time.Minute, 64<<10)
	if err != nil {
		panic(err)
	}
	busy, err := degrade.New(degrade.OnCircuitOpen(degrade.Value[http.Handler](
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "the catalog is resting; try again soon")
		}))))
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(b), sluice.WithClock(clock), sluice.WithFallback(stale, busy))
	if err != nil {
		panic(err)
	}

	fail := false
	mux := http.NewServeMux()
	mux.HandleFunc("GET /catalog/{page}", func(w http.ResponseWriter, _ *http.Request) {
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "catalog v1")
	})
	guard, err := sluicehttp.Middleware(sluicehttp.WithGuard(g))
	if err != nil {
		panic(err)
	}
	h := guard(mux)
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}

	get("/catalog/1") // a good answer is kept
	fail = true
	rec := get("/catalog/1") // the failure opens the breaker; the stale copy answers it
	fmt.Println(rec.Code, rec.Body.String(), "Age:", rec.Header().Get("Age"))
	clock.Advance(30 * time.Second)
	rec = get("/catalog/1") // the breaker is open: the stale copy answers
	fmt.Println(rec.Code, rec.Body.String(), "Age:", rec.Header().Get("Age"))
	rec = get("/catalog/2") // no copy: the static answer
	fmt.Println(rec.Code, rec.Body.String())
	// Output:
	// 200 catalog v1 Age: 0
	// 200 catalog v1 Age: 30
	// 503 the catalog is resting; try again soon
}

func ExampleReject() {
	clock := sluice.NewManualClock(0)
	// The payments service is busy: its 503 with Retry-After opens its
	// breaker in the Transport.
	payments, err := breaker.New("payments")
	if err != nil {
		panic(err)
	}
	rt, err := sluicehttp.Transport(&dependency{}, func(string) (*sluice.Guard, error) {
		return sluice.New(sluice.With(payments), sluice.WithClock(clock))
	})
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	client := &http.Client{Transport: rt}

	later, err := degrade.New(degrade.OnCircuitOpen(degrade.Value[http.Handler](
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "payments are busy: your order is queued\n")
		}))))
	if err != nil {
		panic(err)
	}
	front, err := sluice.New(sluice.WithClock(clock), sluice.WithFallback(later))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		resp, err := client.Post("http://payments.internal/charge", "text/plain", nil)
		if err != nil {
			// The Transport rejected the call: the route answers it as it
			// answers its own rejections, here with its fallback.
			if !sluicehttp.Reject(w, r, err) {
				http.Error(w, "payments unreachable", http.StatusBadGateway)
			}
			return
		}
		defer resp.Body.Close()
		http.Error(w, fmt.Sprint("payments answered ", resp.StatusCode), http.StatusBadGateway)
	})
	guard, err := sluicehttp.Middleware(sluicehttp.WithGuard(front))
	if err != nil {
		panic(err)
	}
	h := guard(mux)

	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/orders", nil))
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	// Output:
	// 502 payments answered 503
	// 200 payments are busy: your order is queued
}
