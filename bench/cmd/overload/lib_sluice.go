package main

// Everything sluice-specific in the harness is in this file: each sluice
// server is built here from sluice's public API, as a user would build it.

import (
	"context"
	"errors"
	"net/http"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
)

// sluiceServe wraps a service in sluice's net/http middleware with a Guard
// holding p.
func sluiceServe(w work, p sluice.Policy) (http.Handler, error) {
	g, err := sluice.New(sluice.With(p))
	if err != nil {
		return nil, err
	}
	mw, err := sluicehttp.Middleware(sluicehttp.WithGuard(g))
	if err != nil {
		return nil, err
	}
	return mw(plain(w)), nil
}

var sluiceShedderLib = shedLib{
	name:  "sluice",
	label: "sluice `adaptive.NewShedder()`",
	wrap: func(w work) (http.Handler, error) {
		p, err := adaptive.NewShedder()
		if err != nil {
			return nil, err
		}
		return sluiceServe(w, p)
	},
}

// sluiceBreakerLib: per route, a breaker tripping at 50 % failures over at
// least 20 calls of its default window, open 1 s; a 100 ms call timeout;
// a fallback for every rejection and failure.
var sluiceBreakerLib = sluiceBreaker("sluice", "sluice breaker, 50 % of ≥ 20 calls",
	breaker.WithErrorRatio(tripRatio, tripMinCalls), breaker.WithOpenDuration(openFor))

// sluiceDefaultBreakerLib: the same with the breaker at its defaults (5
// failures in a row, open 1 s), as a user gets it.
var sluiceDefaultBreakerLib = sluiceBreaker("sluice-defaults", "sluice breaker, defaults")

func sluiceBreaker(name, label string, opts ...breaker.Option) breakerLib {
	return breakerLib{name: name, label: label, build: func(dep *dependency) (caller, error) {
		fb, err := degrade.New(
			degrade.OnRejected(func(_ context.Context, err error) (answer, error) {
				if errors.Is(err, sluice.ErrCircuitOpen) {
					dep.refused()
				}
				return ansFallback, nil
			}),
			degrade.OnTimeout(degrade.Value(ansFallback)),
			degrade.OnError(degrade.Value(ansFallback)),
		)
		if err != nil {
			return nil, err
		}
		guards := map[string]*sluice.Guard{}
		for _, route := range []string{routeA, routeB} {
			br, err := breaker.New(route, opts...)
			if err != nil {
				return nil, err
			}
			g, err := sluice.New(sluice.With(br), sluice.WithTimeout(callDeadline), sluice.WithFallback(fb))
			if err != nil {
				return nil, err
			}
			guards[route] = g
		}
		return func(ctx context.Context, route string) answer {
			a, err := sluice.Execute(ctx, guards[route], func(ctx context.Context) (answer, error) {
				if err := dep.call(ctx); err != nil {
					return ansError, err
				}
				return ansOK, nil
			})
			if err != nil {
				return ansError
			}
			return a
		}, nil
	}}
}
