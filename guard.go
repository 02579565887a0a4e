package sluice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
	"time"
)

// Guard runs requests through a chain of policies, listed outer to inner.
//
// For each request it reads its Clock once when the request arrives and hands
// that instant to every policy's Admit; when the request ends it reads the
// clock once more and hands the end instant and the latency to every policy
// that admitted, unless none of them needs them (see UntimedDone). When a
// policy rejects, the policies before it in the chain, which had admitted,
// are given Done with Released, so they give back what they took.
//
// A Guard is safe for concurrent use. A nil *Guard lets every request through
// unguarded, so an adapter's route table can map unguarded routes to nil.
type Guard struct {
	policies   []Policy
	fastp      []FastPolicy // per policy: its fast form, or nil
	mayWait    []bool       // per policy: its Admit may block; nil when none may
	clock      Clock        // nil: SystemClock, read without an interface call
	classify   Classifier
	onDecision []func(context.Context, Decision)
	onState    []func(StateChange)
	unsubsMu   sync.Mutex
	unsubs     []func()
	fallbacks  []Fallback // outermost layer; see fallback.go
	onFallback []func(context.Context, FallbackEvent)
	timeout    time.Duration // call deadline; 0: none; see timeout.go
	fast       bool          // Do and Execute may take their fast path
	untimed    bool          // every policy is UntimedDone: Done reads no clock
}

// Option configures a Guard.
type Option func(*Guard) error

// With appends policies to the Guard's chain, outer to inner: the first one
// decides first and, when the request ends, hears of it last.
func With(policies ...Policy) Option {
	return func(g *Guard) error {
		for i, p := range policies {
			if isNil(p) {
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
		if isNil(c) {
			return errors.New("sluice: WithClock: nil clock")
		}
		if _, ok := c.(systemClock); ok {
			c = nil
		}
		g.clock = c
		return nil
	}
}

// isNil reports whether v is nil, or holds a nil pointer, map, slice,
// channel or function: a nil *breaker.Breaker is no policy.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return r.IsNil()
	}
	return false
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

// OnDecision registers fn, called once per request with the Guard's decision:
// the rejecting policy's Decision, or, when all admitted, the one whose quota
// is tightest. It runs on the request's goroutine, outside every lock; keep it
// short.
func OnDecision(fn func(ctx context.Context, d Decision)) Option {
	return func(g *Guard) error {
		if fn == nil {
			return errors.New("sluice: OnDecision: nil function")
		}
		g.onDecision = append(g.onDecision, fn)
		return nil
	}
}

// OnStateChange registers fn, called after each state change of any policy in
// the chain that implements StateSource (breakers, load guards), outside the
// policy's locks.
func OnStateChange(fn func(StateChange)) Option {
	return func(g *Guard) error {
		if fn == nil {
			return errors.New("sluice: OnStateChange: nil function")
		}
		g.onState = append(g.onState, fn)
		return nil
	}
}

// New builds a Guard. A Guard with no policies lets everything through.
func New(opts ...Option) (*Guard, error) {
	g := &Guard{classify: DefaultClassifier}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(g); err != nil {
			return nil, err
		}
	}
	g.fastp = make([]FastPolicy, len(g.policies))
	for i, p := range g.policies {
		g.fastp[i] = FastFormOf(p)
		if w, ok := p.(Waiter); ok && w.MayWait() {
			if g.mayWait == nil {
				g.mayWait = make([]bool, len(g.policies))
			}
			g.mayWait[i] = true
		}
	}
	g.fast = g.mayWait == nil && len(g.policies) <= len(Done{}.tickets) &&
		len(g.onDecision) == 0
	g.untimed = g.clock == nil
	for _, p := range g.policies {
		if !IsUntimed(p) {
			g.untimed = false
		}
	}
	if len(g.onState) > 0 {
		for _, p := range g.policies {
			if s, ok := p.(StateSource); ok {
				g.unsubs = append(g.unsubs, s.Subscribe(g.stateChanged))
			}
		}
	}
	return g, nil
}

func (g *Guard) stateChanged(c StateChange) {
	for _, fn := range g.onState {
		fn(c)
	}
}

// Policies returns the Guard's chain, outer to inner.
func (g *Guard) Policies() []Policy {
	if g == nil {
		return nil
	}
	return append([]Policy(nil), g.policies...)
}

// Classify classifies err with the Guard's Classifier.
func (g *Guard) Classify(err error) Outcome {
	if g == nil {
		return DefaultClassifier(err)
	}
	return g.classify(err)
}

// Now reads the Guard's clock.
func (g *Guard) Now() time.Duration {
	if g == nil {
		return time.Since(processStart)
	}
	return g.now()
}

// now is Now for a Guard that is not nil, small enough to inline.
func (g *Guard) now() time.Duration {
	if g.clock == nil {
		return time.Since(processStart)
	}
	return g.clock.Now()
}

// Close removes the Guard's state-change subscriptions and closes every policy
// of its chain that implements io.Closer (a janitor, a CPU sampler's share).
// Closing twice is harmless.
func (g *Guard) Close() error {
	if g == nil {
		return nil
	}
	g.unsubsMu.Lock()
	unsubs := g.unsubs
	g.unsubs = nil
	g.unsubsMu.Unlock()
	for _, u := range unsubs {
		u()
	}
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

// Do runs fn if every policy admits it, and reports how it ended. It returns
// a *RejectedError when a policy rejects, and fn's error otherwise; a
// fallback of the Guard ([WithFallback]) may answer either with nil or
// another error. With [WithTimeout], fn runs with the Guard's deadline.
//
// If fn panics, every policy that admitted it hears of a Failure, and the panic
// goes on up the stack.
func (g *Guard) Do(ctx context.Context, fn func(context.Context) error) error {
	if g == nil {
		return fn(ctx)
	}
	var done Done
	defer done.endOnPanic()
	if err := g.admitRun(ctx, &done); err != nil {
		return g.applyFallback(ctx, err)
	}
	done.ran = true
	if g.timeout > 0 {
		return g.doTimeout(ctx, &done, fn)
	}
	err := fn(ctx)
	done.Finish(err)
	if err != nil {
		return g.applyFallback(ctx, err)
	}
	return nil
}

// Execute runs fn under g as Do does, and returns fn's value, or the value
// of the Guard's fallback of type T ([FallbackOf]) that answered instead.
func Execute[T any](ctx context.Context, g *Guard, fn func(context.Context) (T, error)) (T, error) {
	if g == nil {
		return fn(ctx)
	}
	var done Done
	defer done.endOnPanic()
	if err := g.admitRun(ctx, &done); err != nil {
		var zero T
		return fallbackValue(ctx, g, zero, err)
	}
	done.ran = true
	if g.timeout > 0 {
		return executeTimeout(ctx, g, &done, fn)
	}
	v, err := fn(ctx)
	done.Finish(err)
	if err != nil {
		return fallbackValue(ctx, g, v, err)
	}
	return v, nil
}

// Admit is the first half of Do, for adapters and streams that run the
// request themselves: it asks every policy, outer to inner. When all admit, it
// returns the tightest Decision and a Done that must be finished exactly once
// when the request ends. When one rejects, it returns that Decision, a
// *RejectedError, and a Done on which Finish does nothing.
func (g *Guard) Admit(ctx context.Context) (d Decision, out Done, err error) {
	err = g.AdmitTo(ctx, &d, &out)
	return d, out, err
}

// AdmitTo is Admit writing the Decision to *d and the Done to *done instead
// of returning them, for adapters on a hot path: returning both by value
// costs a copy of each, about 17ns of a request. d may be nil when the
// caller has no use for an admission's Decision: none is then built, and a
// rejection's is in the returned *RejectedError. *done is overwritten; it
// must not hold a request that has not finished.
func (g *Guard) AdmitTo(ctx context.Context, d *Decision, done *Done) error {
	*done = Done{}
	if g == nil {
		if d != nil {
			*d = allowAll
		}
		return nil
	}
	var local Decision
	if d == nil && !g.fast {
		d = &local // an observer wants it, or the slow path writes it
	}
	admitted := false
	defer func() {
		if !admitted {
			done.endOnPanic() // a policy's Admit or an observer panicked
		}
	}()
	err := g.admit(ctx, done, d)
	admitted = true
	done.ran = true
	return err
}

// admitRun is admit for Do and Execute, which need no Decision back: unless
// an OnDecision observer wants it, it builds none.
func (g *Guard) admitRun(ctx context.Context, done *Done) error {
	if !g.fast {
		var d Decision
		return g.admit(ctx, done, &d)
	}
	var now time.Duration
	if g.clock == nil {
		now = time.Since(processStart) // inlined: one read of the runtime's clock
	} else {
		now = g.clock.Now()
	}
	done.g, done.start = g, now
	fastp := g.fastp[:len(g.policies)]
	for i, p := range g.policies {
		var t Ticket
		if f := fastp[i]; f != nil {
			var rej *RejectedError
			if t, _, rej = f.AdmitFast(ctx, now); rej != nil {
				g.release(done, i, now)
				return rej
			}
		} else {
			var d Decision
			if d, t = p.Admit(ctx, now); !d.Allowed {
				g.release(done, i, now)
				return &RejectedError{Decision: d}
			}
		}
		done.tickets[i] = t
		done.n = i + 1
	}
	return nil
}

// release gives Released to the policies before the i-th, which admitted at
// now, when the i-th rejects; done stays inactive.
func (g *Guard) release(done *Done, i int, now time.Duration) {
	done.g = nil
	done.end(g, i-1, Released, now)
}

// admit runs the chain, fills done with the tickets of the policies that
// admitted, and writes to *out the tightest Decision or the rejection; out
// may be nil on the fast path (see AdmitTo). On a rejection done stays
// inactive.
func (g *Guard) admit(ctx context.Context, done *Done, out *Decision) error {
	if g.mayWait != nil || len(g.policies) > len(done.tickets) {
		return g.admitSlow(ctx, done, out)
	}
	var now time.Duration
	if g.clock == nil {
		now = time.Since(processStart)
	} else {
		now = g.clock.Now()
	}
	done.g, done.start = g, now
	tight := false // *out holds a Decision with a quota
	fastp := g.fastp[:len(g.policies)]
	for i, p := range g.policies {
		var t Ticket
		if f := fastp[i]; f != nil {
			var q Quota
			var rej *RejectedError
			if t, q, rej = f.AdmitFast(ctx, now); rej != nil {
				g.release(done, i, now)
				if out != nil {
					*out = rej.Decision
				}
				if len(g.onDecision) > 0 {
					g.decided(ctx, rej.Decision)
				}
				return rej
			}
			// The ticket is kept before anything else can panic (Name).
			done.tickets[i] = t
			done.n = i + 1
			if out != nil && q.Limit >= 0 && (!tight || q.Remaining < out.Remaining) {
				// Field by field: a Decision built aside and copied to *out
				// is read back in wide loads from narrower stores just
				// made, which the CPU cannot forward.
				out.Allowed, out.Policy, out.RetryAfter, out.Cause = true, f.Name(), 0, nil
				out.Limit, out.Remaining, out.Reset = q.Limit, q.Remaining, q.Reset
				tight = true
			}
		} else {
			var d Decision
			if d, t = p.Admit(ctx, now); !d.Allowed {
				g.release(done, i, now)
				if out != nil {
					*out = d
				}
				if len(g.onDecision) > 0 {
					g.decided(ctx, d)
				}
				return &RejectedError{Decision: d}
			}
			done.tickets[i] = t
			done.n = i + 1
			if out != nil && d.Limit >= 0 && (!tight || d.Remaining < out.Remaining) {
				*out, tight = d, true
			}
		}
	}
	if out == nil {
		return nil
	}
	if !tight {
		*out = allowAll
	}
	if len(g.onDecision) > 0 {
		g.decided(ctx, *out)
	}
	return nil
}

// admitSlow is admit for chains longer than a Done's inline tickets or with
// a policy that may wait.
func (g *Guard) admitSlow(ctx context.Context, done *Done, out *Decision) error {
	now := g.now()
	if len(g.policies) > len(done.tickets) {
		done.more = make([]Ticket, len(g.policies))
	}
	done.g, done.start = g, now
	// After a policy that may wait, the instant moves on; the instant each
	// policy decided at is kept, so a release tells each how long ago it
	// admitted.
	at := make([]time.Duration, len(g.policies))
	if g.mayWait != nil {
		done.ats = at // for a Released, here or later (a panic, a release)
	}
	best := allowAll
	for i, p := range g.policies {
		at[i] = now
		d, t := p.Admit(ctx, now)
		if !d.Allowed {
			done.g = nil
			if g.mayWait != nil && g.mayWait[i] {
				now = g.now() // it may have waited before it gave up
			}
			done.end(g, i-1, Released, now)
			done.more, done.ats = nil, nil
			*out = d
			if len(g.onDecision) > 0 {
				g.decided(ctx, d)
			}
			return &RejectedError{Decision: d}
		}
		if done.more != nil {
			done.more[i] = t
		} else {
			done.tickets[i] = t
		}
		done.n = i + 1
		if g.mayWait != nil && g.mayWait[i] {
			// It may have waited: the policies after it decide, and the
			// call's latency starts, at the instant the wait ended.
			now = g.now()
		}
		if d.Limit >= 0 && (best.Limit < 0 || d.Remaining < best.Remaining) {
			best = d
		}
	}
	done.start = now
	*out = best
	if len(g.onDecision) > 0 {
		g.decided(ctx, best)
	}
	return nil
}

var allowAll = Decision{Allowed: true, Limit: -1}

func (g *Guard) decided(ctx context.Context, d Decision) {
	for _, fn := range g.onDecision {
		fn(ctx, d)
	}
}

// Waiter is implemented by policies whose Admit may block: a shaper waiting
// for its slot, a concurrency limit with a queue. A Guard reads its clock
// again after such a policy admits, so the policies after it decide at the
// instant the wait ended, and the latency every policy hears in Done is the
// call's own, without the time spent waiting to be admitted.
type Waiter interface {
	MayWait() bool
}

// Done is the second half of Admit: it carries the tickets of the policies
// that admitted a request until the request ends. Its zero value does nothing.
// A Done is used by one goroutine at a time. It is a value, so that Admit
// allocates nothing: keep one copy and finish that copy once; a second copy
// finished too would report the request twice.
type Done struct {
	g       *Guard
	start   time.Duration
	n       int  // the policies that admitted, the first n of the chain
	ran     bool // the call was handed over to run
	tickets [4]Ticket
	more    []Ticket
	ats     []time.Duration // after a wait: the instant each policy admitted at
}

func (d *Done) ticket(i int) Ticket {
	if d.more != nil {
		return d.more[i]
	}
	return d.tickets[i]
}

// Finish reports the end of the request with err classified by the Guard's
// Classifier. Only the first Finish or Record counts.
func (d *Done) Finish(err error) {
	if d.g == nil {
		return
	}
	if err == nil {
		d.Record(Success)
		return
	}
	d.Record(d.g.classify(err))
}

// Record reports the end of the request with outcome o, reading the clock
// once for the end instant and latency, unless the Guard reads SystemClock,
// every policy of it is UntimedDone and o is not Released. Only the first
// Finish or Record counts.
func (d *Done) Record(o Outcome) {
	g := d.g
	if g == nil {
		return
	}
	d.g = nil
	now := Unread
	if !g.untimed || o == Released {
		if g.clock == nil {
			now = time.Since(processStart)
		} else {
			now = g.clock.Now()
		}
	}
	d.end(g, d.n-1, o, now)
}

// end tells policies i, i-1, ..., 0 of g that the request ended with o at
// now. A policy's Done that panics (a state listener it calls, say) does not
// keep the policies outside it from hearing the end, or their quota would
// leak: they are told, then the panic goes on.
func (d *Done) end(g *Guard, i int, o Outcome, now time.Duration) {
	defer func() {
		if i >= 0 { // the Done of policy i panicked
			d.end(g, i-1, o, now)
		}
	}()
	for ; i >= 0; i-- {
		g.policies[i].Done(d.ticket(i), o, now, d.latency(i, o, now))
	}
}

// latency is what policy i is told of the request's latency at now: 0 when
// the end instant is Unread; for Released after a wait, how long ago its own
// Admit was, which differs from the call's start.
func (d *Done) latency(i int, o Outcome, now time.Duration) time.Duration {
	switch {
	case now == Unread:
		return 0
	case o == Released && d.ats != nil:
		return max(now-d.ats[i], 0)
	}
	return max(now-d.start, 0)
}

// Start returns the instant the request was admitted, on the Guard's clock.
func (d *Done) Start() time.Duration { return d.start }

// Active reports whether the Done still waits for its Finish or Record.
func (d *Done) Active() bool { return d.g != nil }

// endOnPanic ends a Done that a panic left open: the call's own panic is a
// Failure; one before the call ran (a policy's Admit, an OnDecision
// observer) releases the policies that had admitted.
func (d *Done) endOnPanic() {
	if d.g == nil {
		return
	}
	if d.ran {
		d.Record(Failure)
	} else {
		d.Record(Released)
	}
}
