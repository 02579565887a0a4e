package rules

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/shedhook"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/ratelimit"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
)

// built is a policy made from a policySpec.
type built struct {
	spec *policySpec
	p    sluice.Policy
	sw   *degrade.Switch // a shed's switch
	// first is the spec p was made from, before the numbers set on it in
	// place since: a policy made from it and brought to spec is as p is.
	first *policySpec
}

// kept returns b's policy with the numbers of spec, set in place.
func (b *built) kept(spec *policySpec) *built {
	return &built{spec: spec, p: b.p, sw: b.sw, first: b.first}
}

// state is a set of rules in force: what the adapters serve.
type state struct {
	version  Version
	spec     *spec
	policies map[string]*built
	guards   map[string]*sluice.Guard
	sigs     map[string]string          // each guard's signature: what it was built from
	opts     map[string][]sluice.Option // the options each Guard was made with
	routes   *middleware.Routes
	keyer    *middleware.Keyer
	// rebuilt holds, during a load, the Guards of the old state made anew
	// in it, by name: once the load stands, their policies that no Guard
	// of the new state has, nor the rules made, are closed.
	rebuilt map[string]*sluice.Guard
}

// builder makes policies with the program's Redis client.
type builder struct {
	redis redis.UniversalClient
}

// newPolicy makes the policy ps describes.
func (b *builder) newPolicy(ps *policySpec) (*built, error) {
	if ps.kind == "shed" {
		sw, err := degrade.NewSwitch(ps.name)
		if err != nil {
			return nil, err
		}
		sw.Set(ps.on)
		ra := ps.retryAfter
		if ra == 0 {
			ra = time.Second
		}
		p, err := degrade.NewShed(sw, ra)
		if err != nil {
			return nil, err
		}
		return &built{spec: ps, p: p, sw: sw, first: ps}, nil
	}
	if ps.store == "redis" {
		p, err := b.newRedis(ps)
		return &built{spec: ps, p: p, first: ps}, err
	}
	if ps.perKey {
		opts := []ratelimit.Option{ratelimit.WithName(ps.name)}
		opts = append(opts, ratelimit.WithMaxKeys(maxKeys(ps)))
		if ps.idleTTL > 0 {
			opts = append(opts, ratelimit.WithIdleTTL(ps.idleTTL))
		}
		p, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) { return newLocal(ps) }, opts...)
		if err != nil {
			return nil, err
		}
		return &built{spec: ps, p: p, first: ps}, nil
	}
	p, err := newLocal(ps)
	if err != nil {
		return nil, err
	}
	return &built{spec: ps, p: p, first: ps}, nil
}

// nameInGuard returns the name the policy ps describes goes by in its
// Guard, as its constructor names it: a breaker's and a throttle's take
// "breaker/" before it, a shed's "degrade/".
func nameInGuard(ps *policySpec) string {
	switch ps.kind {
	case "breaker", "throttle":
		return "breaker/" + ps.name
	case "shed":
		return "degrade/" + ps.name
	}
	return ps.name
}

// canUpdate reports whether update can set to's numbers in place on b's
// policy, without changing it: it tries on a policy made afresh as b's was,
// and brought to b's numbers as b's was.
func (bd *builder) canUpdate(b *built, to *policySpec) error {
	probe, err := bd.newPolicy(b.first)
	if err != nil {
		return err
	}
	defer closePolicy(probe.p)
	if b.spec != b.first {
		if err := update(probe, b.spec); err != nil {
			return err
		}
	}
	return update(probe.kept(b.spec), to)
}

// maxKeys returns the most keys a per-key policy holds: the file's
// max_keys, or 100,000 (ratelimit.WithMaxKeys's default) when it gives
// none.
func maxKeys(ps *policySpec) int {
	if ps.maxKeys > 0 {
		return ps.maxKeys
	}
	return 100_000
}

// newLocal makes a policy of this process's memory.
func newLocal(ps *policySpec) (sluice.Policy, error) {
	name := ratelimit.WithName(ps.name)
	switch ps.kind {
	case "token-bucket":
		return ratelimit.NewTokenBucket(ps.rate, ps.burst, name)
	case "gcra":
		return ratelimit.NewGCRA(ps.rate, ps.burst, name)
	case "leaky-bucket":
		return ratelimit.NewLeakyBucket(ps.rate, ps.capacity, name)
	case "fixed-window":
		return ratelimit.NewFixedWindow(ps.limit, ps.window, name)
	case "sliding-window":
		return ratelimit.NewSlidingWindow(ps.limit, ps.window, ps.buckets, name)
	case "sliding-log":
		return ratelimit.NewSlidingLog(ps.limit, ps.window, name)
	case "warm-up":
		return ratelimit.NewWarmUp(ps.rate, ps.burst, ps.warmUp, ps.coldFactor, name)
	case "shaper":
		return ratelimit.NewShaper(ps.rate, ps.maxWait, name)
	case "breaker":
		return breaker.New(ps.name, breakerOptions(ps)...)
	case "throttle":
		return breaker.NewAdaptive(ps.name, throttleOptions(ps)...)
	case "shedder":
		return adaptive.NewShedder(shedderOptions(ps)...)
	case "bulkhead":
		return adaptive.NewBulkhead(int(ps.limit), shedderOptions(ps)...)
	}
	return nil, fmt.Errorf("unknown kind %q", ps.kind)
}

func breakerOptions(ps *policySpec) []breaker.Option {
	var o []breaker.Option
	if ps.consecutive > 0 {
		o = append(o, breaker.WithConsecutiveFailures(ps.consecutive))
	}
	if ps.errorRatio > 0 {
		o = append(o, breaker.WithErrorRatio(ps.errorRatio, ps.minRequests))
	}
	if ps.errorCount > 0 {
		o = append(o, breaker.WithErrorCount(ps.errorCount, ps.minRequests))
	}
	if ps.slowCall > 0 {
		o = append(o, breaker.WithSlowCallRatio(ps.slowCall, ps.slowRatio, ps.minRequests))
	}
	if ps.window > 0 {
		o = append(o, breaker.WithRollingWindow(ps.window, rollingBuckets(ps)))
	}
	if ps.windowCalls > 0 {
		o = append(o, breaker.WithCountWindow(ps.windowCalls))
	}
	if ps.openFor > 0 {
		o = append(o, breaker.WithOpenDuration(ps.openFor))
	}
	if ps.halfOpen > 0 {
		o = append(o, breaker.WithHalfOpenProbes(ps.halfOpen, 1))
	}
	return o
}

// rollingBuckets is the number of buckets of a breaker's or throttle's
// rolling window: 10 unless the file says.
func rollingBuckets(ps *policySpec) int {
	if ps.buckets == 0 {
		return 10
	}
	return ps.buckets
}

func throttleOptions(ps *policySpec) []breaker.Option {
	var o []breaker.Option
	if ps.multiplier > 0 {
		o = append(o, breaker.WithMultiplier(ps.multiplier))
	}
	if ps.minRequests > 0 {
		o = append(o, breaker.WithMinThrottleRequests(ps.minRequests))
	}
	if ps.window > 0 {
		o = append(o, breaker.WithRollingWindow(ps.window, rollingBuckets(ps)))
	}
	return o
}

func shedderOptions(ps *policySpec) []adaptive.Option {
	o := []adaptive.Option{adaptive.WithName(ps.name)}
	if ps.maxWait > 0 {
		o = append(o, adaptive.WithQueue(ps.queue, ps.maxWait))
	}
	return o
}

func (b *builder) newRedis(ps *policySpec) (sluice.Policy, error) {
	if b.redis == nil {
		return nil, errors.New("store: redis, but the program gave no Redis client (rules.WithRedis)")
	}
	opts := []redislimit.Option{redislimit.WithName(ps.name)}
	switch ps.fail {
	case "open":
		opts = append(opts, redislimit.WithFailOpen())
	case "closed":
		opts = append(opts, redislimit.WithFailClosed())
	case "local":
		opts = append(opts, redislimit.WithLocalFallback(ps.instances))
	}
	switch ps.kind {
	case "token-bucket":
		return redislimit.NewTokenBucket(b.redis, ps.rate, ps.burst, opts...)
	case "gcra":
		return redislimit.NewGCRA(b.redis, ps.rate, ps.burst, opts...)
	case "fixed-window":
		return redislimit.NewFixedWindow(b.redis, ps.limit, ps.window, opts...)
	case "sliding-window":
		return redislimit.NewSlidingWindow(b.redis, ps.limit, ps.window, ps.buckets, opts...)
	}
	return nil, fmt.Errorf("a %s cannot keep its state in Redis", ps.kind)
}

// closePolicy closes p when it holds something to close (a Keyed's janitor).
func closePolicy(p sluice.Policy) {
	if c, ok := p.(io.Closer); ok {
		_ = c.Close()
	}
}

// carry has made, a policy made anew in the place of was, count was's
// calls in flight as its own until they end, where both bound calls in
// flight (a bulkhead gaining its queue): a backend must not see the old
// calls and a whole new limit at once.
func carry(was, made sluice.Policy) {
	w, ok1 := was.(*adaptive.Shedder)
	m, ok2 := made.(*adaptive.Shedder)
	if ok1 && ok2 {
		shedhook.Carry(w, m)
	}
}

// ruled reports whether p is a policy the rules of st made, which a load
// closes itself when it replaces it.
func ruled(st *state, p sluice.Policy) bool {
	if st == nil {
		return false
	}
	for _, b := range st.policies {
		if b.p == p {
			return true
		}
	}
	return false
}

// servable returns why a server middleware would refuse g (nil: none, or
// no Guard): retries, which it never makes (a program's WithGuardOptions
// may give them).
func servable(g *sluice.Guard) error {
	if _, ok := guardhook.RetryDelay(g, nil, 0, time.Time{}, 0); ok {
		return errors.New("the Guard declares retries (sluice.WithRetry, from WithGuardOptions), which a server middleware never makes: give them to a Guard that calls out")
	}
	return nil
}

// errNotInPlace says a policy cannot take new numbers in place.
var errNotInPlace = errors.New("its kind cannot change this in place")

// update sets to's numbers on b's policy in place, through its setter,
// which validates them as its constructor does and on an error changes
// nothing; b.spec and to are of the same shape.
func update(b *built, to *policySpec) error {
	switch p := b.p.(type) {
	case *degrade.Shed:
		if b.spec.retryAfter != to.retryAfter {
			return errNotInPlace
		}
		b.sw.Set(to.on)
		return nil
	case *ratelimit.Keyed:
		if err := p.SetLimit(func(p sluice.Policy) error { return setLocal(p, b.spec, to) }); err != nil {
			return err
		}
		if b.spec.maxKeys == to.maxKeys {
			return nil
		}
		if err := p.SetMaxKeys(maxKeys(to)); err != nil {
			// The limiters take their numbers back: the policy is made
			// anew, and a load refused later keeps this one.
			_ = p.SetLimit(func(p sluice.Policy) error { return setLocal(p, to, b.spec) })
			return err
		}
		return nil
	case *redislimit.Limiter:
		limit, window := to.limit, to.window
		if to.kind == "gcra" || to.kind == "token-bucket" {
			// A burst of limit refilled in window: the rate limit/window.
			limit = to.burst
			window = time.Duration(to.burst) * to.rate.Period / time.Duration(to.rate.Count)
			if window*time.Duration(to.rate.Count) != time.Duration(to.burst)*to.rate.Period {
				return errNotInPlace
			}
		}
		if b.spec.buckets != to.buckets {
			return errNotInPlace
		}
		return p.SetLimit(limit, window)
	}
	return setLocal(b.p, b.spec, to)
}

// setLocal sets to's numbers on p, a policy of this process's memory made
// from from.
func setLocal(p sluice.Policy, from, to *policySpec) error {
	switch p := p.(type) {
	case *ratelimit.TokenBucket:
		return p.SetLimit(to.rate, to.burst)
	case *ratelimit.GCRA:
		return p.SetLimit(to.rate, to.burst)
	case *ratelimit.LeakyBucket:
		return p.SetLimit(to.rate, to.capacity)
	case *ratelimit.FixedWindow:
		return p.SetLimit(to.limit, to.window)
	case *ratelimit.SlidingWindow:
		return p.SetLimit(to.limit, to.window, to.buckets)
	case *ratelimit.SlidingLog:
		return p.SetLimit(to.limit, to.window)
	case *ratelimit.WarmUp:
		return p.SetLimit(to.rate, to.burst, to.warmUp, to.coldFactor)
	case *ratelimit.Shaper:
		return p.SetLimit(to.rate, to.maxWait)
	case *breaker.Breaker:
		return p.Reconfigure(breakerOptions(to)...)
	case *breaker.Adaptive:
		return p.Reconfigure(throttleOptions(to)...)
	case *adaptive.Shedder:
		if to.kind == "bulkhead" && (from.maxWait > 0) != (to.maxWait > 0) {
			return errNotInPlace // a queue cannot come or go at run time
		}
		o := shedderOptions(to)[1:] // its name stays
		if to.kind == "shedder" && to.maxWait == 0 {
			o = append(o, adaptive.WithQueue(defaultQueue, defaultMaxWait))
		}
		return p.Reconfigure(int(to.limit), o...)
	}
	return errNotInPlace
}

// The queue of a shedder the file gives none, as NewShedder makes it.
const (
	defaultQueue   = 1000
	defaultMaxWait = 200 * time.Millisecond
)

// fallbackHandler is a static answer: status, header fields and body.
type fallbackHandler struct {
	status int
	header http.Header
	body   []byte
}

func (f *fallbackHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	for k, v := range f.header {
		h[k] = slices.Clone(v)
	}
	w.WriteHeader(f.status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(f.body)
	}
}

// fallbackRule returns the degrade rule answering cause with h.
func fallbackRule(cause string, h http.Handler) degrade.Rule[http.Handler] {
	fn := degrade.Value(h)
	switch cause {
	case "rate-limited":
		return degrade.OnRateLimited(fn)
	case "circuit-open":
		return degrade.OnCircuitOpen(fn)
	case "overloaded":
		return degrade.OnOverloaded(fn)
	case "concurrency-limited":
		return degrade.OnConcurrencyLimited(fn)
	case "timeout":
		return degrade.OnTimeout(fn)
	case "rejected":
		return degrade.OnRejected(fn)
	}
	return degrade.OnError(fn)
}

// fallbacksOf returns the fallbacks of the routes that guard g serves, with
// a description of them for its signature; nil when it has none.
func fallbacksOf(s *spec, g string) (sluice.Fallback, string, error) {
	routes := map[string]bool{}
	for _, r := range s.routes {
		if r.guard == g {
			routes[r.pattern] = true
		}
	}
	var all []fallbackSpec // for every route
	byRoute := map[string][]fallbackSpec{}
	for _, f := range s.fallbacks {
		switch {
		case f.route == "":
			all = append(all, f)
		case routes[f.route]:
			byRoute[f.route] = append(byRoute[f.route], f)
		}
	}
	if len(all) == 0 && len(byRoute) == 0 {
		return nil, "", nil
	}
	make1 := func(fs []fallbackSpec) (*degrade.Fallbacks[http.Handler], error) {
		var rs []degrade.Rule[http.Handler]
		for _, f := range fs {
			h := &fallbackHandler{status: f.status, header: f.header(), body: []byte(f.body)}
			rs = append(rs, fallbackRule(f.cause, h))
		}
		return degrade.New(rs...)
	}
	var def *degrade.Fallbacks[http.Handler]
	var err error
	if len(all) > 0 {
		if def, err = make1(all); err != nil {
			return nil, "", err
		}
	}
	m := map[string]*degrade.Fallbacks[http.Handler]{}
	for r, fs := range byRoute {
		// A route's own fallback answers its cause; the others of every
		// route answer the rest.
		for _, f := range all {
			if !slices.ContainsFunc(fs, func(o fallbackSpec) bool { return o.cause == f.cause }) {
				fs = append(fs, f)
			}
		}
		if m[r], err = make1(fs); err != nil {
			return nil, "", err
		}
	}
	// Where in the file they are is no part of what they answer.
	for _, fs := range append([][]fallbackSpec{all}, slices.Collect(maps.Values(byRoute))...) {
		for i := range fs {
			fs[i].at = pos{}
		}
	}
	if len(m) == 0 {
		return httpOnly{def}, fmt.Sprint(all), nil
	}
	fb, err := degrade.NewRoutes(m, def)
	if err != nil {
		return nil, "", err
	}
	return httpOnly{fb}, fmt.Sprint(all, byRoute), nil
}

// httpOnly is a file's fallbacks, which answer HTTP requests: a call made
// with the Guard's Do, whose caller gets no response, gets its own error,
// not a nil that tells it the work was done.
type httpOnly struct {
	sluice.FallbackOf[http.Handler]
}

// Answer declines: Do keeps the call's error.
func (httpOnly) Answer(_ context.Context, err error) (string, error) { return "", err }

func (f fallbackSpec) header() http.Header {
	if f.headers == nil {
		return http.Header{}
	}
	return f.headers.Clone()
}

// keyFunc returns the key function of a guard's key, or nil when the guard
// has none.
func keyFunc(k *keySpec) (middleware.KeyFunc, error) {
	if k == nil {
		return nil, nil
	}
	var fn middleware.KeyFunc
	switch {
	case k.header != "":
		fn = middleware.KeyByHeader(k.header)
	case k.cookie != "":
		fn = middleware.KeyByCookie(k.cookie)
	default:
		var opts []middleware.IPOption
		if len(k.proxies) > 0 {
			opts = append(opts, middleware.TrustedProxies(k.proxies...))
		}
		if len(k.proxyHeaders) > 0 {
			opts = append(opts, middleware.ProxyHeaders(k.proxyHeaders...))
		}
		if k.v4 > 0 {
			opts = append(opts, middleware.IPv4Prefix(k.v4))
		}
		if k.v6 > 0 {
			opts = append(opts, middleware.IPv6Prefix(k.v6))
		}
		e, err := middleware.NewIPExtractor(opts...)
		if err != nil {
			return nil, err
		}
		fn = middleware.KeyByIP(e)
	}
	return func(r middleware.Request) (string, bool) {
		if key, ok := fn(r); ok {
			// A client's key spelt as the shared one is not the bucket of
			// every request without a key: it, and every key that starts
			// with the mark, take the mark before them, so that no two
			// keys meet; whatever the guard's missing key, so that a
			// reload changing it keys each client as before.
			if key == sharedKey || strings.HasPrefix(key, clientMark) {
				key = clientMark + key
			}
			return key, true
		}
		if k.reject {
			return "", false
		}
		return sharedKey, true
	}, nil
}

// clientMark is put before a client's key spelt as sharedKey (see keyFunc).
const clientMark = "~"

// sharedKey is the key of the requests without one, on a guard whose key
// says missing: shared (the default).
const sharedKey = "unknown"

// noKey keys the requests of guards without a key, so that the Keyer never
// rejects them.
func noKey(middleware.Request) (string, bool) { return "", true }

// where prefixes an error with its place in the file.
func where(file string, at pos, what string, err error) error {
	return fmt.Errorf("%s:%d:%d: %s: %w", file, at.line, at.col, what, err)
}

// signature describes what a guard is built from, so that a reload that
// changes none of it keeps the Guard. Its key is not part of it: the
// adapters' Keyer finds the key.
func signature(g *guardSpec, ps []sluice.Policy, fbs string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v|%s|", g.timeout, fbs)
	for _, p := range ps {
		fmt.Fprintf(&b, "%p,", p)
	}
	return b.String()
}
