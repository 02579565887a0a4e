package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/afex/hystrix-go/hystrix"
	sentinel "github.com/alibaba/sentinel-golang/api"
	"github.com/alibaba/sentinel-golang/core/base"
	sentinelcb "github.com/alibaba/sentinel-golang/core/circuitbreaker"
	sentinelconfig "github.com/alibaba/sentinel-golang/core/config"
	"github.com/alibaba/sentinel-golang/core/system"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	fscb "github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	fsfallback "github.com/failsafe-go/failsafe-go/fallback"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
	kratosrl "github.com/go-kratos/aegis/ratelimit"
	"github.com/go-kratos/aegis/ratelimit/bbr"
	"github.com/sony/gobreaker/v2"
	"github.com/zeromicro/go-zero/core/load"
	"github.com/zeromicro/go-zero/core/logx"
)

// work is a service's handler body.
type work func(ctx context.Context) error

// shedLib is a load-shedding library of the surge scenarios: wrap builds the
// server's handler around the service, at the library's defaults.
type shedLib struct {
	name  string // as given to -libs and -serve
	label string // as printed in the tables
	wrap  func(w work) (http.Handler, error)
}

// answer is how a call to the sick dependency was answered.
type answer uint8

const (
	ansOK       answer = iota // by the dependency
	ansFallback               // by the library's fallback
	ansError                  // with an error: refused, timed out or failed
)

func (a answer) String() string {
	return [...]string{"ok", "fallback", "error"}[a]
}

// caller calls the dependency for one request of a route.
type caller func(ctx context.Context, route string) answer

// breakerLib is a library of the slow-dependency scenario: build returns
// its caller, which tells dep.refused when its breaker refuses a call.
type breakerLib struct {
	name  string
	label string
	build func(dep *dependency) (caller, error)
}

// callDeadline is every library's deadline for a call to the dependency,
// and the breaker knobs each is given where it has them.
const (
	callDeadline   = 100 * time.Millisecond
	tripRatio      = 0.5
	tripMinCalls   = 20
	openFor        = time.Second
	routeA, routeB = "a", "b"
)

// plain answers 200 when w succeeds, 500 when it fails.
func plain(w work) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if err := w(r.Context()); err != nil {
			http.Error(rw, "failed", http.StatusInternalServerError)
			return
		}
		_, _ = rw.Write([]byte("ok"))
	})
}

func overloaded(rw http.ResponseWriter) {
	http.Error(rw, "overloaded", http.StatusServiceUnavailable)
}

var shedLibs = []shedLib{
	{"unguarded", "unguarded", func(w work) (http.Handler, error) { return plain(w), nil }},
	sluiceShedderLib,
	{"sentinel", "Sentinel-Go system rule, BBR strategy (always on)", sentinelShed},
	{"hystrix", "hystrix-go defaults (10 concurrent)", hystrixShed},
	{"go-zero", "go-zero adaptive shedder", goZeroShed},
	{"kratos", "kratos aegis BBR", kratosShed},
	{"failsafe-go", "failsafe-go adaptive limiter", failsafeShed},
}

var breakerLibs = []breakerLib{
	{"unguarded", "unguarded (100 ms deadline only)", unguardedCaller},
	sluiceBreakerLib,
	sluiceDefaultBreakerLib,
	{"gobreaker", "gobreaker v2", gobreakerCaller},
	{"failsafe-go", "failsafe-go breaker", failsafeCaller},
	{"hystrix", "hystrix-go", hystrixCaller},
	{"sentinel", "Sentinel-Go circuit breaker", sentinelCaller},
}

func init() {
	// go-zero logs CPU and shedding statistics every minute.
	logx.Disable()
	logx.DisableStat()
	hystrix.SetLogger(hystrix.NoopLogger{})
}

func initSentinel() error {
	conf := sentinelconfig.NewDefaultConfig()
	dir, err := os.MkdirTemp("", "overload-sentinel")
	if err != nil {
		return err
	}
	sentinelDir = dir // removed when the server stops
	conf.Sentinel.Log.Dir = dir
	return sentinel.InitWithConfig(conf)
}

// sentinelDir is the folder of Sentinel's logs in this server process, ""
// when it has none.
var sentinelDir string

// sentinelShed is Sentinel's adaptive system protection: a CPU-usage system
// rule with the BBR strategy, checked on every inbound entry. Sentinel-Go
// (v1.0.4) takes a CPU trigger as a share (it refuses one past 1) and
// compares it with the process's CPU in percent (100 a busy core): a
// trigger of 0.8 is passed at once, and BBR is on from the first request,
// whatever the CPU. No trigger it takes means 80 % of the CPU.
func sentinelShed(w work) (http.Handler, error) {
	if err := initSentinel(); err != nil {
		return nil, err
	}
	if _, err := system.LoadRules([]*system.Rule{{
		MetricType:   system.CpuUsage,
		TriggerCount: 0.8,
		Strategy:     system.BBR,
	}}); err != nil {
		return nil, err
	}
	h := plain(w)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		e, blocked := sentinel.Entry("overload", sentinel.WithTrafficType(base.Inbound))
		if blocked != nil {
			overloaded(rw)
			return
		}
		defer e.Exit()
		h.ServeHTTP(rw, r)
	}), nil
}

// hystrixShed runs the service as a hystrix command with the default
// configuration (10 concurrent, 1 s timeout).
func hystrixShed(w work) (http.Handler, error) {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		err := hystrix.DoC(r.Context(), "overload", func(ctx context.Context) error { return w(ctx) }, nil)
		switch {
		case errors.Is(err, hystrix.ErrMaxConcurrency), errors.Is(err, hystrix.ErrCircuitOpen):
			overloaded(rw)
		case err != nil:
			http.Error(rw, "failed", http.StatusInternalServerError)
		default:
			_, _ = rw.Write([]byte("ok"))
		}
	}), nil
}

func goZeroShed(w work) (http.Handler, error) {
	shedder := load.NewAdaptiveShedder()
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		p, err := shedder.Allow()
		if err != nil {
			overloaded(rw)
			return
		}
		if err := w(r.Context()); err != nil {
			p.Fail()
			http.Error(rw, "failed", http.StatusInternalServerError)
			return
		}
		p.Pass()
		_, _ = rw.Write([]byte("ok"))
	}), nil
}

func kratosShed(w work) (http.Handler, error) {
	limiter := bbr.NewLimiter()
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		done, err := limiter.Allow()
		if err != nil {
			overloaded(rw)
			return
		}
		err = w(r.Context())
		done(kratosrl.DoneInfo{Err: err})
		if err != nil {
			http.Error(rw, "failed", http.StatusInternalServerError)
			return
		}
		_, _ = rw.Write([]byte("ok"))
	}), nil
}

// failsafeShed is failsafe-go's adaptive limiter through its own net/http
// handler.
func failsafeShed(w work) (http.Handler, error) {
	limiter := adaptivelimiter.NewWithDefaults[*http.Response]()
	return failsafehttp.NewHandler(plain(w), limiter), nil
}

func unguardedCaller(dep *dependency) (caller, error) {
	return func(ctx context.Context, _ string) answer {
		ctx, cancel := context.WithTimeout(ctx, callDeadline)
		defer cancel()
		if dep.call(ctx) != nil {
			return ansError
		}
		return ansOK
	}, nil
}

// gobreakerCaller: gobreaker has no ratio knob; ReadyToTrip is where its
// users set one. No fallback.
func gobreakerCaller(dep *dependency) (caller, error) {
	cbs := map[string]*gobreaker.CircuitBreaker[struct{}]{}
	for _, route := range []string{routeA, routeB} {
		cbs[route] = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
			Name:    route,
			Timeout: openFor,
			// A rolling window of 1 s in 100 ms buckets, like sluice's last
			// 100 calls (about 0.7 s of a route here): without one it
			// counts every call since it closed.
			Interval:     time.Second,
			BucketPeriod: 100 * time.Millisecond,
			ReadyToTrip: func(c gobreaker.Counts) bool {
				return c.Requests >= tripMinCalls && float64(c.TotalFailures) >= tripRatio*float64(c.Requests)
			},
		})
	}
	return func(ctx context.Context, route string) answer {
		_, err := cbs[route].Execute(func() (struct{}, error) {
			ctx, cancel := context.WithTimeout(ctx, callDeadline)
			defer cancel()
			return struct{}{}, dep.call(ctx)
		})
		switch {
		case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
			dep.refused()
			return ansError
		case err != nil:
			return ansError
		}
		return ansOK
	}, nil
}

// failsafeCaller: fallback, breaker and timeout, outer to inner. The
// breaker's knob for "50 % of at least 20 calls" is its count-based ratio,
// 10 failures of the last 20 executions.
func failsafeCaller(dep *dependency) (caller, error) {
	execs := map[string]failsafe.Executor[answer]{}
	for _, route := range []string{routeA, routeB} {
		cb := fscb.NewBuilder[answer]().
			WithFailureThresholdRatio(uint(tripRatio*tripMinCalls), tripMinCalls).
			WithDelay(openFor).
			Build()
		fb := fsfallback.NewWithFunc(func(exec failsafe.Execution[answer]) (answer, error) {
			if errors.Is(exec.LastError(), fscb.ErrOpen) {
				dep.refused()
			}
			return ansFallback, nil
		})
		execs[route] = failsafe.With[answer](fb, cb, fstimeout.New[answer](callDeadline))
	}
	return func(ctx context.Context, route string) answer {
		a, err := execs[route].WithContext(ctx).GetWithExecution(func(exec failsafe.Execution[answer]) (answer, error) {
			if err := dep.call(exec.Context()); err != nil {
				return ansError, err
			}
			return ansOK, nil
		})
		if err != nil {
			return ansError
		}
		return a
	}, nil
}

// hystrixCaller: a command per route at 50 % over ≥ 20 calls, 1 s sleep
// window, 100 ms timeout, and a fallback.
func hystrixCaller(dep *dependency) (caller, error) {
	for _, route := range []string{routeA, routeB} {
		hystrix.ConfigureCommand(route, hystrix.CommandConfig{
			Timeout:                int(callDeadline / time.Millisecond),
			RequestVolumeThreshold: tripMinCalls,
			ErrorPercentThreshold:  int(tripRatio * 100),
			SleepWindow:            int(openFor / time.Millisecond),
		})
	}
	return func(ctx context.Context, route string) answer {
		fellBack := false
		err := hystrix.DoC(ctx, route, func(ctx context.Context) error {
			// hystrix stops waiting at its timeout; the call itself needs
			// the deadline to give its connection back.
			ctx, cancel := context.WithTimeout(ctx, callDeadline)
			defer cancel()
			return dep.call(ctx)
		}, func(_ context.Context, err error) error {
			if errors.Is(err, hystrix.ErrCircuitOpen) {
				dep.refused()
			}
			fellBack = true
			return nil
		})
		switch {
		case err != nil:
			return ansError
		case fellBack:
			return ansFallback
		}
		return ansOK
	}, nil
}

// sentinelCaller: an error-ratio rule per route (resource), over the
// statistic window of Sentinel's documented examples (5 s in 10 buckets).
// Sentinel has no fallback of its own.
func sentinelCaller(dep *dependency) (caller, error) {
	if err := initSentinel(); err != nil {
		return nil, err
	}
	var rules []*sentinelcb.Rule
	for _, route := range []string{routeA, routeB} {
		rules = append(rules, &sentinelcb.Rule{
			Resource:         route,
			Strategy:         sentinelcb.ErrorRatio,
			RetryTimeoutMs:   uint32(openFor / time.Millisecond),
			MinRequestAmount: tripMinCalls,
			// The sliding window of its documented examples: 5 s in 10
			// buckets. (One bucket would be a 10 s window that starts
			// afresh at every multiple of 10 s of the wall clock.)
			StatIntervalMs:               5000,
			StatSlidingWindowBucketCount: 10,
			Threshold:                    tripRatio,
		})
	}
	if _, err := sentinelcb.LoadRules(rules); err != nil {
		return nil, fmt.Errorf("sentinel rules: %w", err)
	}
	return func(ctx context.Context, route string) answer {
		e, blocked := sentinel.Entry(route)
		if blocked != nil {
			if blocked.BlockType() == base.BlockTypeCircuitBreaking {
				dep.refused()
			}
			return ansError
		}
		defer e.Exit()
		ctx, cancel := context.WithTimeout(ctx, callDeadline)
		defer cancel()
		if err := dep.call(ctx); err != nil {
			sentinel.TraceError(e, err)
			return ansError
		}
		return ansOK
	}, nil
}
