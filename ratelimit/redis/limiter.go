package redislimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/isnil"
	"github.com/sluice-go/sluice/internal/policywindow"
	"github.com/sluice-go/sluice/ratelimit"
)

// maxExact bounds every product the script computes: Lua numbers are doubles,
// exact for integers up to 2^53.
const maxExact = int64(1) << 52

// limit is one quota a Limiter decides: its algorithm, parameters, key layout
// and failure policy.
type limit struct {
	name        string
	keyPre      string                    // see keyPrefix
	algArg      any                       // pre-boxed script argument
	nums        atomic.Pointer[limitNums] // replaced by SetLimit
	single      *script                   // the admission of a Limiter with this limit alone
	batch       *script                   // and of requests coalesced (coalesce.go)
	keyFunc     func(context.Context) string
	perResource bool
	failure     failurePolicy
	local       atomic.Pointer[localShare] // failLocal's; replaced by SetLimit
	keys        keyCache
	// remake builds a Limiter of this limit's constructor and options with
	// the numbers SetLimit is given: its validation, and its numbers.
	remake     func(limit int64, window time.Duration) (*Limiter, error)
	openName   string // name + ":open"
	closedName string // name + ":closed"
}

// limitNums are the numbers of a limit, as the scripts take them.
type limitNums struct {
	periodArg any // pre-boxed script arguments
	quotaArg  any
	quota     int64
	window    time.Duration // the time to refill the quota, or the window
}

// Limiter is a rate limit whose state lives in Redis, shared by every
// instance of a service that uses the same Redis and name. It is a
// sluice.Policy; Admit runs one Lua script (one round trip) per request.
//
// A Limiter built by All decides several limits for one request in that one
// round trip, all or nothing: when one rejects, none is charged.
//
// A Limiter is safe for concurrent use. It does not own its Redis client:
// close the client when done.
type Limiter struct {
	name      string
	client    redis.UniversalClient
	limits    []*limit
	timeout   time.Duration
	deadlines *epochs
	br        *redisBreaker
	observer  func(Event)
	neg       *negCache
	cluster   bool
	topo      *topology // nil unless the client has a slot map (recover.go)

	subMu sync.Mutex
	subs  map[int]func(sluice.StateChange)
	subID int

	pendMu  sync.Mutex
	pending map[sluice.Ticket]*call
	nextID  sluice.Ticket
	calls   sync.Pool

	lanes   *[laneShards]laneShard // nil unless coalescing (coalesce.go)
	waiters sync.Pool
}

// NewGCRA returns a limiter that admits requests at rate r with bursts of up
// to burst, by the generic cell rate algorithm: one stored instant per key,
// the theoretical arrival time. It is the default algorithm: the smallest
// state and the cheapest script. Decisions match ratelimit.GCRA's.
//
// The emission interval r.Period/r.Count is rounded up to the microsecond, so
// the limiter never admits faster than r; it must be at least 1µs.
func NewGCRA(client redis.UniversalClient, r ratelimit.Rate, burst int64, opts ...Option) (*Limiter, error) {
	return newRated(client, "gcra", 'g', r, burst, opts, func(r ratelimit.Rate, b int64, name string) (sluice.Policy, error) {
		return ratelimit.NewGCRA(r, b, ratelimit.WithName(name))
	})
}

// NewTokenBucket returns a limiter holding up to burst tokens per key, one
// added every r.Period/r.Count (rounded up to the microsecond); a request
// takes its cost in tokens. Decisions match ratelimit.TokenBucket's: Remaining
// is the tokens left, Reset the time until the bucket is full.
func NewTokenBucket(client redis.UniversalClient, r ratelimit.Rate, burst int64, opts ...Option) (*Limiter, error) {
	return newRated(client, "token-bucket", 't', r, burst, opts, func(r ratelimit.Rate, b int64, name string) (sluice.Policy, error) {
		return ratelimit.NewTokenBucket(r, b, ratelimit.WithName(name))
	})
}

// NewFixedWindow returns a limiter admitting up to limit cost units per key
// in each window, windows aligned on Redis time (a multiple of window since
// the Unix epoch). Reset and RetryAfter are the time to the window's end.
// rateWindow is counted in whole microseconds.
func NewFixedWindow(client redis.UniversalClient, limit int64, window time.Duration, opts ...Option) (*Limiter, error) {
	return newWindowed(client, "fixed-window", 'f', limit, window, opts, func(l int64, w time.Duration, name string) (sluice.Policy, error) {
		return ratelimit.NewFixedWindow(l, w, ratelimit.WithName(name))
	})
}

// NewSlidingWindowWeighted returns a sliding window estimated from two
// fixed windows: per key, the counts of the current and the previous window,
// the previous one weighted by the part of it still inside the sliding
// window. It admits a request when
// previous×(window−elapsed)/window + current + cost ≤ limit, in integers.
// Reset is the time until both counts have slid out; RetryAfter the time
// until the weighted sum leaves room for the cost. It keeps three numbers
// per key, whatever the window; NewSlidingWindow counts exactly what
// ratelimit.SlidingWindow counts, in a ring of buckets. Its script
// multiplies counts by times: limit × window in microseconds must stay
// under 2^50 (about 18 million a minute, 13,000 a day).
func NewSlidingWindowWeighted(client redis.UniversalClient, limit int64, window time.Duration, opts ...Option) (*Limiter, error) {
	return newWindowed(client, "sliding-window-weighted", 's', limit, window, opts, func(l int64, w time.Duration, name string) (sluice.Policy, error) {
		return ratelimit.NewSlidingWindow(l, w, bucketsFor(w), ratelimit.WithName(name))
	})
}

// bucketsFor picks the local sliding window's ring size: the largest of a few
// that divides the window.
func bucketsFor(w time.Duration) int {
	for _, b := range []int{10, 8, 6, 5, 4, 3, 2} {
		if w%time.Duration(b) == 0 {
			return b
		}
	}
	return 1
}

func newRated(client redis.UniversalClient, algorithm string, alg byte, r ratelimit.Rate, burst int64, opts []Option,
	local func(ratelimit.Rate, int64, string) (sluice.Policy, error)) (*Limiter, error) {
	l, err := buildRated(client, algorithm, alg, r, burst, opts, local)
	if err == nil {
		l.limits[0].remake = func(n int64, w time.Duration) (*Limiter, error) {
			return buildRated(client, algorithm, alg, ratelimit.Rate{Count: n, Period: w}, n, opts, local)
		}
	}
	return l, err
}

func buildRated(client redis.UniversalClient, algorithm string, alg byte, r ratelimit.Rate, burst int64, opts []Option,
	local func(ratelimit.Rate, int64, string) (sluice.Policy, error)) (*Limiter, error) {
	if r.Count <= 0 || r.Period <= 0 {
		return nil, fmt.Errorf("redislimit: %s: rate %v: want a positive count and period", algorithm, r)
	}
	if burst < 1 {
		return nil, fmt.Errorf("redislimit: %s: burst %d must be at least 1", algorithm, burst)
	}
	ivNS := int64(r.Period) / r.Count
	if int64(r.Period)%r.Count != 0 {
		ivNS++
	}
	iv := (ivNS + 999) / 1000
	if ivNS < 1000 {
		return nil, fmt.Errorf("redislimit: %s: rate %v is faster than one event per microsecond", algorithm, r)
	}
	if burst > maxExact/iv {
		return nil, fmt.Errorf("redislimit: %s: burst %d at rate %v spans more than 2^52µs", algorithm, burst, r)
	}
	cfg := defaultConfig(algorithm)
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	share := func() (sluice.Policy, error) {
		n := cfg.instances
		if int64(r.Period) > int64(1<<62)/n {
			return nil, fmt.Errorf("redislimit: %s: rate %v divided by %d instances is too slow", algorithm, r, n)
		}
		return local(ratelimit.Rate{Count: r.Count, Period: r.Period * time.Duration(n)}, max(burst/n, 1), cfg.name+":local")
	}
	// The window as the local twin reports it, from the interval in
	// nanoseconds: the script's, in microseconds, would make a burst of 3
	// at 3 a second a window of 1.000002 s, which the RateLimit-Policy
	// field tells as q=5;w=2.
	return build(client, cfg, string(alg), iv, burst, time.Duration(burst*ivNS), share)
}

func newWindowed(client redis.UniversalClient, algorithm string, alg byte, lim int64, window time.Duration, opts []Option,
	local func(int64, time.Duration, string) (sluice.Policy, error)) (*Limiter, error) {
	l, err := buildWindowed(client, algorithm, alg, lim, window, opts, local)
	if err == nil {
		l.limits[0].remake = func(n int64, w time.Duration) (*Limiter, error) {
			return buildWindowed(client, algorithm, alg, n, w, opts, local)
		}
	}
	return l, err
}

func buildWindowed(client redis.UniversalClient, algorithm string, alg byte, lim int64, window time.Duration, opts []Option,
	local func(int64, time.Duration, string) (sluice.Policy, error)) (*Limiter, error) {
	if lim < 1 {
		return nil, fmt.Errorf("redislimit: %s: limit %d must be at least 1", algorithm, lim)
	}
	if window < time.Microsecond || window%time.Microsecond != 0 {
		return nil, fmt.Errorf("redislimit: %s: window %v must be a positive whole number of microseconds", algorithm, window)
	}
	w := int64(window / time.Microsecond)
	// The weighted window's script multiplies the limit by the window; the
	// fixed window's only counts.
	if alg == 's' && lim > maxExact/w/4 {
		return nil, fmt.Errorf("redislimit: %s: limit %d × window %v exceeds 2^50", algorithm, lim, window)
	}
	if lim > maxExact {
		return nil, fmt.Errorf("redislimit: %s: limit %d exceeds 2^52", algorithm, lim)
	}
	cfg := defaultConfig(algorithm)
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	share := func() (sluice.Policy, error) {
		return local(max(lim/cfg.instances, 1), window, cfg.name+":local")
	}
	return build(client, cfg, string(alg), w, lim, windowOf(string(alg), w), share)
}

// keyName writes a limiter's name in its keys with no ':' of its own, so
// that the prefix, which may hold ':', and the name cannot run together:
// prefix "a:b" with name "c" and prefix "a" with name "b:c" keep apart.
var keyName = strings.NewReplacer("%", "%25", ":", "%3A")

// windowOf returns the window of a windowed limit of algorithm alg with
// the script's period (µs): its length (for a ring of buckets,
// "b" and their number, the bucket's length times that number).
func windowOf(alg string, period int64) time.Duration {
	switch alg[0] {
	case 'b':
		n, _ := strconv.ParseInt(alg[1:], 10, 64)
		return time.Duration(period*n) * time.Microsecond
	}
	return time.Duration(period) * time.Microsecond
}

// keyPrefix returns the prefix of a limit's keys: its name, its algorithm
// and, for a window, the period its state is counted in. A GCRA's and a
// token bucket's state reads the same at any rate (an instant; what the
// bucket lacks), so their keys leave the rate out: an instance given a new
// rate by SetLimit and one started with it share one limit.
func keyPrefix(cfg config, alg string, period int64) string {
	pre := cfg.prefix + ":" + keyName.Replace(cfg.name) + ":" + alg
	if alg == "g" || alg == "t" {
		return pre + ":"
	}
	return pre + "/" + strconv.FormatInt(period, 10) + ":"
}

// build makes a limiter of one limit of algorithm alg: a letter ('g', 't',
// 'f', 's'), or 'b' and the number of buckets; period and quota are the
// script's parameters.
func build(client redis.UniversalClient, cfg config, alg string, period, quota int64, window time.Duration, share func() (sluice.Policy, error)) (*Limiter, error) {
	if err := checkClient(client); err != nil {
		return nil, err
	}
	l := &limit{
		name:        cfg.name,
		keyPre:      keyPrefix(cfg, alg, period),
		algArg:      alg,
		single:      singleScripts[alg[0]],
		batch:       batchScripts[alg[0]],
		keyFunc:     cfg.keyFunc,
		perResource: cfg.perResource,
		failure:     cfg.failure,
		openName:    cfg.name + ":open",
		closedName:  cfg.name + ":closed",
	}
	l.nums.Store(&limitNums{periodArg: strconv.FormatInt(period, 10), quotaArg: strconv.FormatInt(quota, 10),
		quota: quota, window: window})
	if alg[0] == 'b' {
		l.single, l.batch = bucketScripts(alg[1:])
	}
	if cfg.failure == failLocal {
		if _, err := share(); err != nil {
			return nil, fmt.Errorf("redislimit: local fallback: %w", err)
		}
		l.local.Store(&localShare{m: make(map[string]sluice.Policy), max: cfg.localCapacity, make: share})
	}
	br, err := newRedisBreaker(cfg.failures, cfg.openFor)
	if err != nil {
		return nil, err
	}
	return newLimiter(client, cfg, []*limit{l}, br), nil
}

func newLimiter(client redis.UniversalClient, cfg config, limits []*limit, br *redisBreaker) *Limiter {
	lim := &Limiter{
		name:      cfg.name,
		client:    client,
		limits:    limits,
		timeout:   cfg.timeout,
		deadlines: newEpochs(cfg.timeout),
		br:        br,
		observer:  cfg.observer,
		pending:   make(map[sluice.Ticket]*call),
	}
	_, lim.cluster = client.(*redis.ClusterClient)
	lim.topo = newTopology(client)
	// The breaker's state changes are the limiter's: its observer and its
	// subscribers hear them, under its name. The breaker may outlive the
	// limiter (All shares the first limiter's): it holds the limiter weakly,
	// and the subscription ends when the limiter is collected.
	wl := weak.Make(lim)
	unsubscribe := br.b.Subscribe(func(c sluice.StateChange) {
		if l := wl.Value(); l != nil {
			l.stateChanged(c)
		}
	})
	runtime.AddCleanup(lim, func(unsubscribe func()) { unsubscribe() }, unsubscribe)
	if cfg.negCache > 0 {
		lim.neg = &negCache{m: make(map[string]negEntry), max: cfg.negCache, seed: maphash.MakeSeed()}
	}
	n := len(limits)
	if n == 1 && !cfg.noCoalescing {
		lim.lanes = new([laneShards]laneShard)
		for i := range lim.lanes {
			lim.lanes[i].m = make(map[string]*lane)
		}
		lim.waiters.New = func() any { return &waiter{wake: make(chan struct{}, 1)} }
	}
	lim.calls.New = func() any {
		c := &call{keys: make([]string, n), args: make([]any, 1+5*n), tags: make([]uint64, n),
			local: make([]localTicket, n), ds: make([]sluice.Decision, n), marks: make([]int64, n), negGen: make([]uint64, n)}
		return c
	}
	return lim
}

// All returns a Limiter that decides every one of limiters for each request
// in one script call, all or nothing: a request is admitted only when every
// limit admits it, and a rejected request charges none of them. Its decision
// is the rejecting limit's (the one with the longest RetryAfter) or, when all
// admit, the tightest one's (the least Remaining), under All's name. A limit
// may be given once: limiters of one name and algorithm (and, for a window,
// period) share their state, and All refuses two of them.
//
// Each limit keeps its own keys, key function and failure policy; All takes
// WithName (default "ratelimit/redis/all"), WithTimeout, WithBreaker,
// WithObserver and WithNegativeCache, and otherwise the timeout and the
// breaker of the first limiter. All the limiters must use the same client.
//
// In a Redis Cluster the limits' keys must share one slot for each request:
// the hash tag is the hash of the request's key, so limits keyed by the same
// key function (per user at different rates; per user and per user and route
// with WithPerResource) always do. A request whose keys would land in
// different slots is decided by the failure policies and reported to the
// observer with ErrCrossSlot.
func All(limiters []*Limiter, opts ...Option) (*Limiter, error) {
	if len(limiters) == 0 {
		return nil, errors.New("redislimit: All: no limiters")
	}
	if len(limiters) > 64 {
		return nil, fmt.Errorf("redislimit: All: %d limiters, at most 64", len(limiters))
	}
	cfg := defaultConfig("all")
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	if len(cfg.memberOnly) > 0 {
		return nil, fmt.Errorf("redislimit: All: %s configures one limit: set it on that limiter", cfg.memberOnly[0])
	}
	first := limiters[0]
	if first == nil {
		return nil, errors.New("redislimit: All: limiter 0 is nil")
	}
	var limits []*limit
	for i, l := range limiters {
		if l == nil {
			return nil, fmt.Errorf("redislimit: All: limiter %d is nil", i)
		}
		if l.client != first.client {
			return nil, fmt.Errorf("redislimit: All: limiter %d (%s) uses another Redis client", i, l.name)
		}
		limits = append(limits, l.limits...)
	}
	// A limit given twice (the same limiter, or two of one name, algorithm
	// and period, which share their state) would be charged once and given
	// back twice.
	for i, m := range limits {
		for _, o := range limits[:i] {
			if m.keyPre == o.keyPre && m.perResource == o.perResource {
				return nil, fmt.Errorf("redislimit: All: limit %q appears twice (limiters of one name, algorithm and period share their state)", m.name)
			}
		}
	}
	if !cfg.timeoutSet {
		cfg.timeout = first.timeout
	}
	br := first.br
	if cfg.breakerSet {
		var err error
		if br, err = newRedisBreaker(cfg.failures, cfg.openFor); err != nil {
			return nil, err
		}
	}
	lim := newLimiter(first.client, cfg, limits, br)
	lim.topo = first.topo // one throttle of reloads for the limits and their All
	return lim, nil
}

// Name returns the limiter's name, as given by WithName.
func (l *Limiter) Name() string { return l.name }

func init() {
	// The adapters read a limiter's window for the RateLimit-Policy header
	// field through package policywindow.
	policywindow.Register(func(p any) time.Duration {
		if l, ok := p.(*Limiter); ok {
			return l.rateWindow()
		}
		return 0
	})
}

// rateWindow returns the limiter's window: a fixed or sliding window's length,
// a GCRA's or token bucket's time to refill its burst; for a limiter built by
// All, the window its limits share, or 0 when they differ (its Decision
// does not say which limit decided). The middleware gives it to clients as
// the w parameter of RateLimit-Policy.
func (l *Limiter) rateWindow() time.Duration {
	w := l.limits[0].nums.Load().window
	for _, m := range l.limits[1:] {
		if m.nums.Load().window != w {
			return 0
		}
	}
	return w
}

// Subscribe registers fn, called after each change of the state of the
// breaker around Redis ("closed", "open", "half-open"), outside every lock.
// It makes a Limiter a sluice.StateSource. A nil fn is ignored.
func (l *Limiter) Subscribe(fn func(sluice.StateChange)) (unsubscribe func()) {
	if fn == nil {
		return func() {}
	}
	l.subMu.Lock()
	defer l.subMu.Unlock()
	if l.subs == nil {
		l.subs = make(map[int]func(sluice.StateChange))
	}
	id := l.subID
	l.subID++
	l.subs[id] = fn
	return func() {
		l.subMu.Lock()
		delete(l.subs, id)
		l.subMu.Unlock()
	}
}

func (l *Limiter) stateChanged(c sluice.StateChange) {
	l.topo.breakerChanged(c.To, l.br.openFor)
	if l.observer != nil {
		l.observer(Event{src: l, Kind: EventStateChange, Policy: l.name, At: c.At, From: c.From, To: c.To})
	}
	l.subMu.Lock()
	fns := make([]func(sluice.StateChange), 0, len(l.subs))
	for _, fn := range l.subs {
		fns = append(fns, fn)
	}
	l.subMu.Unlock()
	for _, fn := range fns {
		fn(sluice.StateChange{Policy: l.name, From: c.From, To: c.To, At: c.At})
	}
}

// checkClient rejects a client whose calls would not honour the limiter's
// timeout: go-redis applies a context's deadline to its socket reads and
// writes only with ContextTimeoutEnabled.
func checkClient(client redis.UniversalClient) error {
	if isnil.Of(client) {
		return errors.New("redislimit: nil Redis client")
	}
	enabled := true
	switch c := client.(type) {
	case *redis.Client:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		enabled = c.Options().ContextTimeoutEnabled
	}
	if !enabled {
		return errors.New("redislimit: the Redis client's ContextTimeoutEnabled is off, so a call could outlast the limiter's timeout: set ContextTimeoutEnabled: true in its options")
	}
	return nil
}

var _ sluice.Policy = (*Limiter)(nil)
var _ sluice.StateSource = (*Limiter)(nil)
