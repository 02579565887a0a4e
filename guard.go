package sluice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sluice-go/sluice/internal/isnil"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/nowait"
	"github.com/sluice-go/sluice/internal/shedhook"
)

// Guard runs calls through a chain of policies, listed outer to inner.
//
// [Guard.Do] and [Execute] run a function as one call; adapters and streams
// run theirs through [Guard.Begin] and [Call.End], the same path. For each
// call the Guard reads its Clock once when the call arrives and hands that
// instant to every policy's Admit; when the call ends it reads the clock once
// more and tells every policy that admitted, unless none of them declared
// [NeedsEnd]. When a policy rejects, the policies before it in the chain,
// which had admitted, are told Released, so they give back what they took.
//
// A Guard is safe for concurrent use. A nil *Guard lets every call through
// unguarded, so an adapter's route table can map unguarded routes to nil.
type Guard struct {
	policies []Policy
	names    []string // each policy's Name, read once
	waits    []bool   // per policy: its Admit may block; nil when none may
	clock    Clock    // nil: SystemClock, read without an interface call
	classify Classifier
	unsubsMu sync.Mutex
	unsubs   []func()
	closed   bool // Close has run; under unsubsMu
	// retired: the Guard serves no new call (Close ran, or a rules reload
	// put its successor in force): its observers may settle its counts.
	retired     atomic.Bool
	refused     atomic.Bool // New failed to attach its observers: it never serves
	fallbacks   []Fallback  // outermost layer; see fallback.go
	onFallback  []func(context.Context, FallbackEvent)
	timeout     time.Duration                   // call deadline; 0: none; see timeout.go
	untimed     bool                            // no policy NeedsEnd, no observer: End reads no clock
	rejs        []atomic.Pointer[rejectedError] // per policy: its last rejection
	name        string                          // WithName
	obs         *observation                    // nil: unobserved; see observe.go
	shadow      atomic.Uint64                   // bit i: policy i is in shadow mode; see shadow.go
	shadowMu    sync.Mutex                      // serialises SetShadow
	shadowAll   bool                            // SetShadow(""): the whole Guard
	wholeShadow atomic.Bool                     // shadowAll as the calls read it: no deadline
	shadowSet   uint64                          // the policies shadowed by name
	shadowInit  []string                        // WithShadow
	retry       *retrier                        // nil: no retries; see retry.go
	// carried is what the Guard's Stats held when it took another's counts
	// (guardhook.Carry): observers that carry counts across successors
	// themselves leave it out. Nil when it took none.
	carried atomic.Pointer[Stats]
	// resources: a policy declares NeedsResource, or the Guard has an
	// observer or a fallback, which may read the call's resource.
	resources bool
}

// Option configures a Guard. Options apply in order: those that add (With,
// WithFallback, WithObserver, WithShadow) add to what came before, and
// those that set one value (WithName, WithTimeout, WithClassifier,
// WithClock, WithRetry) replace it, so that a layer of options (a rules
// file's over a program's) can override another.
type Option func(*Guard) error

// With appends policies to the Guard's chain, outer to inner: the first one
// decides first and, when the request ends, hears of it last.
func With(policies ...Policy) Option {
	return func(g *Guard) error {
		for i, p := range policies {
			if isnil.Of(p) {
				return fmt.Errorf("sluice: policy %d is nil", len(g.policies)+i)
			}
		}
		g.policies = append(g.policies, policies...)
		return nil
	}
}

// WithClock makes the Guard read c instead of SystemClock. Every policy of the
// chain must measure time on the same clock.
func WithClock(c Clock) Option {
	return func(g *Guard) error {
		if isnil.Of(c) {
			return errors.New("sluice: WithClock: nil clock")
		}
		if _, ok := c.(systemClock); ok {
			c = nil
		}
		g.clock = c
		return nil
	}
}

// WithClassifier makes the Guard classify the errors of protected calls with
// c instead of DefaultClassifier.
func WithClassifier(c Classifier) Option {
	return func(g *Guard) error {
		if c == nil {
			return errors.New("sluice: WithClassifier: nil classifier")
		}
		g.classify = c
		return nil
	}
}

// New builds a Guard. A Guard with no policies lets everything through.
func New(opts ...Option) (*Guard, error) {
	g := &Guard{classify: DefaultClassifier}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("sluice: New: option %d is nil", i)
		}
		if err := o(g); err != nil {
			return nil, err
		}
	}
	g.names = make([]string, len(g.policies))
	g.rejs = make([]atomic.Pointer[rejectedError], len(g.policies))
	g.untimed = g.clock == nil
	seen := make(map[Policy]int, len(g.policies))
	for i, p := range g.policies {
		if j, dup := seenPolicy(seen, p, i); dup {
			return nil, fmt.Errorf("sluice: policy %d (%s) is policy %d again: a policy in a chain twice would decide every call twice", i, p.Name(), j)
		}
		if !utf8.ValidString(p.Name()) {
			// No metric label, log line or JSON can carry it: a Prometheus
			// scrape would fail for every Guard.
			return nil, fmt.Errorf("sluice: policy %d's name %q is not valid UTF-8", i, p.Name())
		}
		g.names[i] = p.Name()
		needs := p.Needs()
		if needs&Waits != 0 {
			if g.waits == nil {
				g.waits = make([]bool, len(g.policies))
			}
			g.waits[i] = true
		}
		if needs&NeedsEnd != 0 {
			g.untimed = false
		}
		if needs&NeedsResource != 0 {
			g.resources = true
		}
	}
	if len(g.fallbacks) > 0 || len(g.onFallback) > 0 {
		g.resources = true
	}
	for _, name := range g.shadowInit {
		if err := g.setShadowLocked(name, true); err != nil {
			return nil, err
		}
	}
	if g.obs != nil {
		if err := g.attach(); err != nil {
			return nil, err
		}
		g.untimed = false // the Guard counts each call's duration
		g.resources = true
	}
	return g, nil
}

// seenPolicy records p as the i-th policy and reports the index it had
// already, if it is in the chain twice. Only policies held by pointer are
// checked: two equal values of a type without state decide as one would.
func seenPolicy(seen map[Policy]int, p Policy, i int) (int, bool) {
	if reflect.ValueOf(p).Kind() != reflect.Pointer {
		return 0, false
	}
	if j, ok := seen[p]; ok {
		return j, true
	}
	seen[p] = i
	return 0, false
}

// Policies returns the Guard's chain, outer to inner.
func (g *Guard) Policies() []Policy {
	if g == nil {
		return nil
	}
	return append([]Policy(nil), g.policies...)
}

// detach lets the Guard's observers go, once: Close's first half, which a
// rules reload that makes a Guard anew does alone (its policies, some of
// them kept by the successor, stay open).
func (g *Guard) detach() {
	g.unsubsMu.Lock()
	unsubs := g.unsubs
	g.unsubs = nil
	g.unsubsMu.Unlock()
	for _, u := range unsubs {
		u()
	}
}

// now reads the Guard's clock; small enough to inline.
func (g *Guard) now() time.Duration {
	if g.clock == nil {
		return monoclock.Now()
	}
	return g.clock.Now()
}

// Close detaches the Guard's observers and closes every policy
// of its chain that implements io.Closer (a janitor, a CPU sampler's share).
// Closing twice is harmless.
func (g *Guard) Close() error {
	if g == nil {
		return nil
	}
	g.unsubsMu.Lock()
	if g.closed {
		g.unsubsMu.Unlock()
		return nil // a policy is closed once: io.Closer says nothing of twice
	}
	g.closed = true
	g.unsubsMu.Unlock()
	g.retired.Store(true)
	g.detach()
	var errs []error
	for _, p := range g.policies {
		if c, ok := p.(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// errNilArgument is returned by Do, Execute and Begin for a nil context or
// function: a programming error, reported rather than a panic.
var errNilArgument = errors.New("sluice: nil context or function")

// errBegin is returned by Begin for a nil Call or one admitted and not yet
// ended, which it leaves as it is: overwriting it would lose what its
// policies gave it.
var errBegin = errors.New("sluice: Begin with a nil Call or one not yet ended")

// Do runs fn as one call through the Guard: Begin, fn with the call's
// context, End. It returns the rejection when a policy rejects, fn's error
// otherwise (a timeout error (matching [ErrTimeout]) past the Guard's deadline); a fallback of
// the Guard ([WithFallback]) may answer either with nil or another error.
//
// With [WithRetry], a call that failed runs fn again, each attempt
// admitted afresh, and the fallbacks answer the last attempt's error.
//
// If fn panics, every policy that admitted it hears of a Failure, and the panic
// goes on up the stack.
func (g *Guard) Do(ctx context.Context, fn func(context.Context) error) error {
	if ctx == nil || fn == nil {
		return errNilArgument
	}
	if g == nil {
		return fn(ctx)
	}
	if g.retry != nil {
		_, err := retried(ctx, g, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
		if err != nil && len(g.fallbacks) > 0 {
			return g.applyFallback(ctx, err)
		}
		return err
	}
	c := Call{g: g, parent: ctx}
	defer c.endOnPanic()
	if err := g.begin(ctx, &c, false); err != nil {
		return c.End(err)
	}
	return c.End(fn(c.Context()))
}

// Execute runs fn under g as Do does, and returns fn's value, or the value
// of the Guard's fallback of type T ([FallbackOf]) that answered instead.
// A fallback of the Guard that declares an answer for the error but answers
// another type is a mistake that Execute reports as an error rather than
// skip.
func Execute[T any](ctx context.Context, g *Guard, fn func(context.Context) (T, error)) (T, error) {
	if ctx == nil || fn == nil {
		var zero T
		return zero, errNilArgument
	}
	if g == nil {
		return fn(ctx)
	}
	if g.retry != nil {
		v, err := retried(ctx, g, fn)
		if err != nil {
			return fallbackValue(ctx, g, v, err)
		}
		return v, nil
	}
	c := Call{g: g, parent: ctx}
	defer c.endOnPanic()
	if err := g.begin(ctx, &c, false); err != nil {
		var zero T
		return fallbackValue(ctx, g, zero, err)
	}
	v, err := fn(c.Context())
	if err = c.finish(err); err != nil {
		return fallbackValue(ctx, g, v, err)
	}
	return v, nil
}

// Call is one call's passage through a Guard, from [Guard.Begin] to
// [Call.End]: the tickets of the policies that admitted it, its Decision,
// and its context with the Guard's deadline. Its zero value is a finished
// call; Begin writes into one its caller keeps, on its stack or in a
// struct of its own, and one that has ended can be begun again. A Call is
// used by one goroutine at a time, and must not be copied after Begin:
// finishing two copies would report the call twice.
type Call struct {
	// The fields are ordered so that the Call packs into as few words as
	// it can: every byte of it is zeroed for every call, by its caller's
	// declaration or, for one begun before, by Begin.
	g      *Guard
	parent context.Context
	ctx    context.Context // parent with the Guard's deadline; nil: parent
	cancel context.CancelFunc
	d      Decision
	start  time.Duration
	wait   time.Duration // how long the call waited in the policies that may
	// tickets are the tickets of the policies that admitted, for a chain
	// no longer than tickets; more holds them for a longer chain, followed,
	// with waited, by the instant each policy admitted at (ats for a
	// shorter chain).
	tickets [4]Ticket
	ats     [4]time.Duration
	more    []Ticket
	skip    uint64 // bit i: policy i rejected the call in shadow mode; it hears no end
	n       int32  // the policies that admitted, the first n of the chain
	live    bool   // admitted, and not yet reported
	ran     bool   // the call was handed over to run
	waited  bool   // the chain has a policy that may wait: ats are kept
	shard   uint8  // an observed call's shard of the Guard's counters
	used    bool   // begun by Begin: a later Begin clears it first
	cut     bool   // its end came at a deadline: its latency is a bound (see end)
	// shadowCause is the cause of the first shadow rejection, when skip is set.
	shadowCause Cause
}

// Begin asks every policy, outer to inner, to admit a call, and writes the
// call into c, a zero Call or one that has ended. When all admit, it
// returns nil, and c is the call to run: its Context carries the Guard's
// deadline, and End must be called exactly once when the call has
// returned. When one rejects, it returns the rejection; End with it then
// applies the Guard's fallbacks. Either way, Decision tells what was
// decided. A Call admitted and not yet ended is left as it is, and Begin
// returns an error that End and Report then pass on untouched: the call
// under way is not ended by it.
//
//	var call sluice.Call
//	err := g.Begin(ctx, &call)
//	if err == nil {
//		err = work(call.Context())
//	}
//	err = call.End(err)
func (g *Guard) Begin(ctx context.Context, c *Call) error {
	// Begin writes into c where its caller keeps it: a Call returned by
	// value was copied on its way out, and the copy's wide loads waited on
	// the narrow stores just made. It is small enough to be inlined, so
	// for a Call on its caller's stack the pointers stored here take no
	// write barrier, which stores through a pointer take while the
	// collector marks.
	if c == nil || c.live {
		return errBegin
	}
	c.g, c.parent = g, ctx
	return g.beginCall(ctx, c)
}

// beginCall is Begin once c's Guard and context are set.
func (g *Guard) beginCall(ctx context.Context, c *Call) error {
	if c.used {
		// One begun before: begin takes a zero Call.
		*c = Call{g: g, parent: ctx}
	}
	c.used = true
	if ctx == nil {
		c.g = nil // End then answers the error as it is: no fallback hides it
		return errNilArgument
	}
	if g == nil {
		c.d.Allowed, c.d.Limit = true, -1 // allowAll
		return nil
	}
	defer c.releaseOnPanic()
	return g.begin(ctx, c, true)
}

// releaseOnPanic releases the policies that admitted c when a policy's
// Admit or an observer panicked while it was begun: c is then live but was
// never handed over to run. Once begun, c is left as it is.
func (c *Call) releaseOnPanic() {
	if c.live && !c.ran {
		c.Report(Released, nil)
	}
}

// Context returns the context to run the call with: the one given to Begin,
// with the Guard's deadline when it has a timeout ([WithTimeout]).
func (c *Call) Context() context.Context {
	if c.ctx != nil {
		return c.ctx
	}
	return c.parent
}

// Decision returns what the Guard decided: the rejecting policy's Decision,
// or, when all admitted, the one whose quota is tightest.
func (c *Call) Decision() Decision { return c.d }

// End ends the call with err, the error the call returned, and returns the
// error its caller gets. For an admitted call it turns err into a
// timeout error (matching [ErrTimeout]) when the Guard's deadline passed, classifies it with the
// Guard's Classifier and tells every policy that admitted. Then, for a
// rejection or a failed call alike, the Guard's fallbacks may answer: the
// result is nil when one did. Only the first End or Report of a call counts;
// End on a call already ended still applies the fallbacks to err.
func (c *Call) End(err error) error {
	if err == errBegin { // Begin's refusal of c under way: not c's end
		return err
	}
	g := c.g
	err = c.finish(err)
	if err == nil || g == nil || len(g.fallbacks) == 0 {
		return err
	}
	return g.applyFallback(c.parent, err)
}

// finish is End without the fallbacks: the timeout mapping, the
// classification and the report.
func (c *Call) finish(err error) error {
	if !c.live {
		return err
	}
	if err == nil {
		return c.Report(Success, nil)
	}
	return c.finishErr(err)
}

// finishErr is finish for an error, which the Guard's Classifier judges:
// should it panic, the call ends as a Failure first, so that no policy
// keeps its admission (a bulkhead's slot) for good, and the panic goes on.
func (c *Call) finishErr(err error) error {
	judged := false
	defer func() {
		if !judged {
			c.Report(Failure, err)
		}
	}()
	o, rerr := c.classified(err)
	judged = true
	return c.report(o, rerr, false) // classified mapped the timeout, if any
}

// deadlineLike reports whether err, past a Guard's deadline, may be its
// effect: a rejection (an inner Guard's wait cut short) or a context's end.
func deadlineLike(err error) bool {
	return errors.Is(err, ErrRejected) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// classified returns the outcome of c's end with err, by its Guard's
// Classifier, and err as the end reports it: a timeout once the Guard's own
// deadline has passed.
func (c *Call) classified(err error) (Outcome, error) {
	if err == nil {
		return Success, nil
	}
	o := c.g.classify(classifiable(c.Context(), err))
	if c.cancel != nil && (o == Failure || deadlineLike(err)) {
		// Past the Guard's deadline, a failure is the timeout, and so is a
		// rejection (an inner Guard's wait the deadline cut) or a context's
		// end (a driver answers a deadline with Canceled); another error
		// the Classifier counts for nothing (a not-found) stands as it is,
		// as the adapters send a 4xx or a NotFound answered past it.
		if te := c.g.timedOut(c.ctx, err); te != err {
			return c.g.classify(classifiable(c.Context(), te)), te
		}
	}
	return o, err
}

// Report ends an admitted call with outcome o, for adapters that classify
// a call themselves (by an HTTP status, a gRPC code) and answer it
// themselves: no fallback runs. It returns err, turned into a timeout error
// (matching [ErrTimeout]) when the Guard's deadline passed and o is a
// Failure or err a rejection or a context's end (see [WithTimeout]). Only
// the first End or Report counts; a later one returns err as it is. An
// Outcome that is none of the four (a Classifier's mistake) counts as a
// Failure.
func (c *Call) Report(o Outcome, err error) error { return c.report(o, err, true) }

// report is Report, mapping err to the timeout when mapTimeout is set.
func (c *Call) report(o Outcome, err error, mapTimeout bool) error {
	if err == errBegin || !c.live {
		return err
	}
	if o > Released {
		o = Failure // the counters and the policies know four
	}
	g := c.g
	c.live = false
	if c.cancel != nil {
		// Past the deadline, the timeout: an end reported a failure, or a
		// rejection or a context's end (an adapter that took an error for
		// the timeout says so with one that matches DeadlineExceeded).
		if mapTimeout && (o == Failure || deadlineLike(err)) {
			err = g.timedOut(c.ctx, err)
		}
		c.cancel()
		c.cancel = nil
	}
	if o == Failure && shedhook.CutShort != nil {
		// A failure at a deadline, the Guard's (err is the timeout by now,
		// whatever the adapter passed: an HTTP 504) or the caller's: the
		// call ran that long at least (see end). An adapter that reports
		// no error (a gRPC status it answers itself) is told by the call's
		// context, which the cancel above leaves as it was had its
		// deadline passed; an error of the call's own, not deadline-like,
		// is its own failure, whenever the caller's deadline fell.
		c.cut = errors.Is(err, context.DeadlineExceeded) ||
			err == nil && c.Context().Err() == context.DeadlineExceeded
	}
	now := c.start
	if !g.untimed || o == Released {
		if g.clock == nil {
			now = monoclock.Now()
		} else {
			now = g.clock.Now()
		}
	}
	if g.obs != nil && c.ran {
		// Counted before the policies hear it, and told to the observers
		// after, deferred: a Done that panics (a state listener) must not
		// lose the call's end, and an observer that panics must not keep
		// the policies from hearing it (their slots and probes would
		// leak). A call whose admission panicked (ran unset) was never
		// counted admitted, and its release ends nothing observed.
		g.obs.ended(c, o, err, now)
		if len(g.obs.calls) != 0 {
			defer g.obs.tell(c, o, err, now)
		}
	}
	c.end(g, o, now)
	return err
}

// Start returns the instant the call arrived, on the Guard's clock: for an
// admitted call that waited in a policy, the instant its wait ended.
func (c *Call) Start() time.Duration { return c.start }

var allowAll = Decision{Allowed: true, Limit: -1}

// begin runs the chain for c, a zero Call but for its g and parent, which
// its caller sets (see Begin), and, from Begin, its used. want tells it to
// build the Decision even when no observer needs it.
func (g *Guard) begin(ctx context.Context, c *Call, want bool) error {
	if g.obs != nil && len(g.obs.calls) != 0 {
		want = true // the observers hear the Decision
	}
	if g.retry != nil {
		g.retry.began()
	}
	if g.waits != nil || len(g.policies) > len(c.tickets) {
		return g.beginSlow(ctx, c)
	}
	var now time.Duration
	if g.clock == nil {
		now = monoclock.Now() // inlined: one read of the runtime's clock
	} else {
		now = g.clock.Now()
	}
	c.live, c.start = true, now
	tight := false // c.d holds a Decision with a quota
	for i, p := range g.policies {
		// Admit's three results each stay in registers. A seven-word
		// struct in their place was stored to memory and copied there, and
		// the copy's wide loads cannot be forwarded from the narrow stores
		// just made: about 13 ns a policy a call where it was measured.
		t, q, cause := p.Admit(ctx, now)
		if cause != nil {
			if g.shadow.Load()>>i&1 == 0 {
				return g.rejected(ctx, c, i, now, q, cause, want)
			}
			g.shadowed(c, i, cause)
			c.n = int32(i + 1)
			continue
		}
		// The ticket is kept before anything else can panic.
		c.tickets[i] = t
		c.n = int32(i + 1)
		// A shadowed policy's quota is not the call's (see beginSlow).
		if want && q.Limit >= 0 && (!tight || q.Remaining < c.d.Remaining) && g.shadow.Load()>>i&1 == 0 {
			// Field by field: a Decision built aside and copied is read back
			// in wide loads from narrower stores just made, which the CPU
			// cannot forward. Its RetryAfter and Cause are still zero.
			c.d.Allowed, c.d.Policy = true, g.names[i]
			c.d.Limit, c.d.Remaining, c.d.Reset = q.Limit, q.Remaining, q.Reset
			tight = true
		}
	}
	if want && !tight {
		// allowAll, without the write barriers of a copy of its pointers.
		c.d.Allowed, c.d.Limit = true, -1
	}
	if g.obs != nil {
		g.obs.admitted(c)
	}
	if g.timeout > 0 && !g.wholeShadow.Load() {
		c.ctx, c.cancel = g.callContext(ctx)
	}
	c.ran = true
	return nil
}

// rejected ends the admission of c, which policy i rejected at now with
// cause and q: the policies before it are released, and the rejection is
// returned.
func (g *Guard) rejected(ctx context.Context, c *Call, i int, now time.Duration, q Quota, cause error, want bool) error {
	c.live = false
	if want {
		c.d = q.decision(g.names[i], cause)
	}
	err := g.rejection(i, now, q, cause)
	if g.obs != nil {
		// Counted and told whatever the policies do with their release:
		// a Done that panics must not lose the rejection (as in Report).
		defer g.obs.rejected(ctx, g, i, cause, err, now, c.wait, &c.d, c.skip)
	}
	if c.n > 0 { // the policies before i admitted: c.n is i
		c.end(g, Released, now)
	}
	if c.more != nil || c.waited {
		c.more, c.waited = nil, false
	}
	return err
}

// rejection returns the error of policy i's rejection at now with cause
// and q. Rejections
// whose answers agree to the millisecond (an open breaker's, for the whole
// of its open spell) share one error, so a flood of them allocates nothing:
// RetryAfter and Reset are kept as instants, rounded up to the millisecond,
// and read relative to the moment they are read.
func (g *Guard) rejection(i int, now time.Duration, q Quota, cause error) error {
	// A RetryAfter or Reset of 0 (none known) is no instant: it agrees with
	// any other 0, whenever the rejection came.
	var retryAt, resetAt time.Duration
	if q.RetryAfter > 0 {
		retryAt = instantAfter(now, q.RetryAfter)
	}
	if q.Reset > 0 {
		resetAt = instantAfter(now, q.Reset)
	}
	if e := g.rejs[i].Load(); e != nil && e.d.Cause == cause && e.retryAt == retryAt &&
		e.resetAt == resetAt && e.d.Limit == q.Limit && e.d.Remaining == q.Remaining &&
		e.hasRetry == (q.RetryAfter > 0) && (e.d.Reset > 0) == (q.Reset > 0) {
		return e
	}
	e := &rejectedError{d: q.decision(g.names[i], cause), g: g, retryAt: retryAt, resetAt: resetAt, hasRetry: q.RetryAfter > 0}
	if cacheable(cause) {
		g.rejs[i].Store(e)
	}
	return e
}

// instantAfter returns the instant d > 0 after now, rounded up to a whole
// millisecond; the last instant there is for one past it.
func instantAfter(now, d time.Duration) time.Duration {
	t := now + d
	if t < now || t > math.MaxInt64-time.Millisecond {
		return math.MaxInt64
	}
	return ceilMilli(t)
}

// ceilMilli rounds t up to a whole millisecond.
func ceilMilli(t time.Duration) time.Duration {
	if r := t % time.Millisecond; r > 0 {
		return t - r + time.Millisecond
	} else if r < 0 {
		return t - r
	}
	return t
}

// cacheable reports whether cause can be compared with ==: an error of a
// type that cannot is never shared, since comparing two of that type
// would panic.
func cacheable(cause error) bool {
	switch cause {
	case ErrRateLimited, ErrCircuitOpen, ErrOverloaded, ErrConcurrencyLimited, ErrTimeout:
		return true
	}
	// Comparable by its value, not its type: a struct whose field holds an
	// error of a slice's type is of a comparable type, and comparing two of
	// them panics.
	return reflect.ValueOf(cause).Comparable()
}

// beginSlow is begin for chains longer than a Call's inline tickets or with
// a policy that may wait.
func (g *Guard) beginSlow(ctx context.Context, c *Call) error {
	now := g.now()
	// After a policy that may wait, the instant moves on; the instant each
	// policy decided at is kept, so a release tells each how long ago it
	// admitted.
	// Kept for a Released, here or later (a panic, a release).
	c.waited = g.waits != nil
	np := len(g.policies)
	if np > len(c.tickets) {
		if c.waited {
			c.more = make([]Ticket, 2*np) // the tickets, then the instants
		} else {
			c.more = make([]Ticket, np)
		}
	}
	c.live, c.start = true, now
	best, bi := Quota{Limit: -1}, -1
	// The call's wait is the time in the policies that may wait, each from
	// the clock's last reading before it (the decisions of the policies
	// between count with it: a read before each would cost every call):
	// the clock is read after such a policy.
	var waited time.Duration
	for i, p := range g.policies {
		w := g.waits != nil && g.waits[i]
		if c.waited && c.more != nil {
			c.more[np+i] = Ticket(now)
		} else if c.waited {
			c.ats[i] = now
		}
		before := now
		pctx := ctx
		// Read once: a waiting policy's mode decides both whether it may
		// make the call wait and whether its rejection holds, and a
		// SetShadow while it decides must not enforce the answer it gave
		// shadowed (one that would have queued).
		shadowed := g.shadow.Load()>>i&1 != 0
		if w && shadowed {
			// Shadowed, it decides whether it would admit at once, and
			// makes no call wait (see shadow.go).
			pctx = nowait.Context(ctx)
		}
		t, q, cause := p.Admit(pctx, now)
		if w {
			// It may have waited, and given up: the policies after it
			// decide, and the call's latency starts, at the instant the
			// wait ended.
			now = g.now()
			waited += now - before
		}
		if cause != nil && !shadowed {
			c.wait = waited
			return g.rejected(ctx, c, i, now, q, cause, true)
		}
		if cause != nil {
			g.shadowed(c, i, cause)
			c.n = int32(i + 1)
			continue
		}
		if c.more != nil {
			c.more[i] = t
		} else {
			c.tickets[i] = t
		}
		c.n = int32(i + 1)
		// A shadowed policy's quota is not the call's: clients told it
		// would hold off for a limit only watched.
		if q.Limit >= 0 && !shadowed && (best.Limit < 0 || q.Remaining < best.Remaining) {
			best, bi = q, i
		}
	}
	c.start = now
	c.wait = waited
	c.d = allowAll
	if g.obs != nil {
		g.obs.admitted(c)
	}
	if bi >= 0 {
		c.d = best.decision(g.names[bi], nil)
	}
	if g.timeout > 0 && !g.wholeShadow.Load() {
		c.ctx, c.cancel = g.callContext(ctx)
	}
	c.ran = true
	return nil
}

func (c *Call) ticket(i int) Ticket {
	if c.more != nil {
		return c.more[i]
	}
	return c.tickets[i]
}

// end tells the policies that admitted c, the first c.n of g's chain, inner
// to outer, that the call ended with o at now, and leaves c.n at 0. A
// policy's Done that panics (a state listener it calls, say) does not keep
// the policies outside it from hearing the end, or their quota would leak:
// they are told, then the panic goes on. c.n counts down as they are told,
// so that the deferred check needs no variable of the loop's.
func (c *Call) end(g *Guard, o Outcome, now time.Duration) {
	if c.n == 1 && c.skip == 0 {
		// One policy to tell: should its Done panic, none is left outside
		// it, and the deferred check is not needed.
		c.n = 0
		lat := time.Duration(-1)
		if !g.untimed || o == Released {
			lat = c.latency(0, o, now)
		}
		c.done(g, 0, o, now, lat)
		return
	}
	c.endAll(g, o, now)
}

// endAll is end for a chain of any length.
func (c *Call) endAll(g *Guard, o Outcome, now time.Duration) {
	defer func() {
		if c.n > 0 { // a Done panicked: the policies outside it are told
			c.endAll(g, o, now)
		}
	}()
	untimed := g.untimed && o != Released
	for c.n > 0 {
		c.n--
		i := int(c.n)
		if c.skip != 0 && c.skip>>i&1 != 0 {
			continue // it rejected the call in shadow mode: it took nothing
		}
		lat := time.Duration(-1)
		if !untimed {
			lat = c.latency(i, o, now)
		}
		c.done(g, i, o, now, lat)
	}
}

// done tells policy i of g that c ended. A call a deadline ended (cut) ran
// at least lat, maybe much longer had it been let: a Shedder learns its
// latency as a bound, not as the service's.
func (c *Call) done(g *Guard, i int, o Outcome, now, lat time.Duration) {
	if c.cut && shedhook.Cut(g.policies[i], uint64(c.ticket(i)), uint8(o), now, lat) {
		return
	}
	g.policies[i].Done(c.ticket(i), o, now, lat)
}

// latency is what policy i is told of the call's latency at now: for
// Released after a wait, how long ago its own Admit was, which differs from
// the call's start.
func (c *Call) latency(i int, o Outcome, now time.Duration) time.Duration {
	if o == Released && c.waited {
		var at time.Duration
		if c.more != nil {
			at = time.Duration(c.more[len(c.more)/2+i])
		} else {
			at = c.ats[i]
		}
		return max(now-at, 0)
	}
	return max(now-c.start, 0)
}

// endOnPanic ends a Call that a panic left open: the call's own panic is a
// Failure; one before the call ran (a policy's Admit)
// releases the policies that had admitted.
func (c *Call) endOnPanic() {
	if !c.live {
		return
	}
	if c.ran {
		c.Report(Failure, nil)
	} else {
		c.Report(Released, nil)
	}
}
