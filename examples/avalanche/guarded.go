package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/ratelimit"
)

// guarded is the same frontend with sluice:
//
//   - at the front door, a token bucket at twice the offered rate and the
//     bulkhead of as many requests in flight as are offered a second;
//   - on each dependency call, a breaker (open 0.5 s, then up to 1.5 s), a
//     concurrency limit and a timeout (five times the healthy latency, plus
//     20 ms), so a slow endpoint can hold only a few of the pool's
//     connections, and only briefly;
//   - on the route whose dependency turns sick, a fallback that answers a
//     generic list when the call is rejected, times out or fails.
type guarded struct {
	dep    string
	client *http.Client
	front  *sluice.Guard
	fast   *sluice.Guard
	flaky  *sluice.Guard
}

// servedBy is where the fallback observer notes, for the request at hand,
// which fallback answered it.
type servedBy struct{ fallback string }

type servedByKey struct{}

func noteFallback(ctx context.Context, ev sluice.FallbackEvent) {
	if s, ok := ctx.Value(servedByKey{}).(*servedBy); ok {
		s.fallback = ev.Fallback
	}
}

// popular is what the degraded route answers when its dependency cannot.
var popular = []byte(`{"recommendations":["bestseller-1","bestseller-2"],"degraded":true}`)

func newGuarded(cfg Config, depBase string, client *http.Client) (frontend, error) {
	g := &guarded{dep: depBase, client: client}
	var err error
	// The front door: never binding at the offered rate, but a ceiling.
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(int64(2*cfg.Rate)), int64(cfg.Rate/5+1),
		ratelimit.WithName("ratelimit/front-door"))
	if err != nil {
		return nil, err
	}
	// A bulkhead of one request in flight per request a second offered: a
	// ceiling too. (A service that must keep up in a surge puts
	// adaptive.NewShedder here; this scenario is about a slow dependency,
	// whose slowness the breakers and timeouts below answer, and which a
	// limit learnt from the whole frontend's latency would mistake for
	// overload.)
	load, err := adaptive.NewBulkhead(cfg.Rate, adaptive.WithName("adaptive/front-door"))
	if err != nil {
		return nil, err
	}
	if g.front, err = sluice.New(append(cfg.guard("front-door"), sluice.With(limiter, load))...); err != nil {
		return nil, err
	}

	// Each dependency call gives up at a few times its healthy latency and
	// holds at most twice the connections its healthy traffic needs.
	perRoute := float64(cfg.Rate) / 2
	dep := func(name string, healthy time.Duration, trip breaker.Option, extra ...sluice.Option) (*sluice.Guard, error) {
		b, err := breaker.New(name, trip, breaker.WithBackoff(500*time.Millisecond, 1500*time.Millisecond))
		if err != nil {
			return nil, err
		}
		slots := max(10, int(2*perRoute*healthy.Seconds()+0.5))
		bulkhead, err := adaptive.NewBulkhead(slots, adaptive.WithName("bulkhead/"+name))
		if err != nil {
			return nil, err
		}
		opts := append(cfg.guard(name), sluice.With(b, bulkhead), sluice.WithTimeout(5*healthy+20*time.Millisecond))
		opts = append(opts, extra...)
		return sluice.New(opts...)
	}
	// The catalog breaker looks at the error ratio of the last calls; the
	// recommendations one trips at 3 failures in a row, to fall back fast,
	// and answers a generic list whenever its call is rejected or fails.
	if g.fast, err = dep("catalog", cfg.FastLatency, breaker.WithErrorRatio(0.5, 20)); err != nil {
		return nil, err
	}
	generic, err := degrade.New(
		degrade.OnRejected(degrade.Value(popular)),
		degrade.OnTimeout(degrade.Value(popular)),
		degrade.OnError(degrade.Value(popular)),
	)
	if err != nil {
		return nil, err
	}
	if g.flaky, err = dep("recommendations", cfg.CalmLatency, breaker.WithConsecutiveFailures(3),
		sluice.WithFallback(generic), sluice.OnFallback(noteFallback)); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *guarded) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+routePaths[0], func(w http.ResponseWriter, r *http.Request) {
		body, err := g.call(r.Context(), g.fast, "/fast")
		if err != nil {
			fail(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	mux.HandleFunc("GET "+routePaths[1], func(w http.ResponseWriter, r *http.Request) {
		served := &servedBy{}
		body, err := g.call(context.WithValue(r.Context(), servedByKey{}, served), g.flaky, "/flaky")
		if err != nil {
			fail(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if served.fallback != "" {
			// Degraded: a generic answer now beats a perfect one too late.
			w.Header().Set(fallbackHeader, served.fallback)
		}
		_, _ = w.Write(body)
	})
	guard, err := sluicehttp.Middleware(sluicehttp.WithGuard(g.front))
	if err != nil {
		panic(err) // the options are fixed above: a mistake in this program
	}
	return guard(mux)
}

// fail answers a request whose dependency call failed: a rejection with 429
// (rate limited) or 503 and Retry-After in whole seconds, at least 1, as the
// middleware answers its own (so that the client knows when to come back),
// a timeout with 504 Gateway Timeout, anything else with 502 Bad Gateway.
func fail(w http.ResponseWriter, err error) {
	d, rejected := sluice.RejectionOf(err)
	switch {
	case rejected:
		status := http.StatusServiceUnavailable
		if sluice.CauseOf(d.Cause) == sluice.CauseRateLimited {
			status = http.StatusTooManyRequests
		}
		retry := max(int64((d.RetryAfter+time.Second-1)/time.Second), 1)
		w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, d.Cause.Error(), status)
	case errors.Is(err, sluice.ErrTimeout):
		http.Error(w, "gateway timeout", http.StatusGatewayTimeout)
	default:
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}
}

var errStatus = errors.New("dependency answered other than 2xx")

// call asks the dependency for path under guard.
func (g *guarded) call(ctx context.Context, guard *sluice.Guard, path string) ([]byte, error) {
	return sluice.Execute(ctx, guard, func(ctx context.Context) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.dep+path, nil)
		if err != nil {
			return nil, err
		}
		resp, err := g.client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, err
		}
		// Anything but a 2xx is not the answer asked for: passing a 4xx on
		// as a 200 would serve its error text as the data.
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return nil, fmt.Errorf("%w: %d", errStatus, resp.StatusCode)
		}
		return body, nil
	})
}

func (g *guarded) close() {
	_ = g.front.Close()
	_ = g.fast.Close()
	_ = g.flaky.Close()
}
