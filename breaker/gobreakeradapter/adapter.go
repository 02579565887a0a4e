package gobreakeradapter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/breakerview"
	"github.com/sluice-go/sluice/internal/listen"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sony/gobreaker/v2"
)

// errExcluded is the error the Policy hands gobreaker for an Ignored or
// Released outcome; New excludes it from gobreaker's counts.
var errExcluded = errors.New("gobreakeradapter: outcome not counted")

// errFailure is the error the Policy hands gobreaker for a Failure outcome.
// gobreaker's default IsSuccessful counts it as a failure.
var errFailure = errors.New("gobreakeradapter: call failed")

// Policy is a sluice.Policy backed by a gobreaker.TwoStepCircuitBreaker. Its
// rejections match sluice.ErrCircuitOpen, for gobreaker's ErrOpenState and
// ErrTooManyRequests alike. It is safe for concurrent use.
type Policy struct {
	name    string
	cb      *gobreaker.TwoStepCircuitBreaker[any]
	timeout time.Duration // the open duration

	openedAt atomic.Pointer[time.Time] // when the breaker last opened; nil if unknown
	held     atomic.Int64              // the Guard's instant OpenFor holds the Policy open until

	mu      sync.Mutex
	pending map[sluice.Ticket]func(error)
	next    sluice.Ticket

	events events
}

// New builds a gobreaker.TwoStepCircuitBreaker from st and wraps it. It
// excludes the Ignored and Released calls from gobreaker's counts, hands
// st.ReadyToTrip counts whose Requests leave them out (a limiter behind
// the breaker that rejects half the calls would otherwise halve a failure
// ratio), and chains st.OnStateChange so the Policy learns when the
// breaker opens (for RetryAfter) and reports its state changes to
// Subscribe's listeners, outside gobreaker's lock. A Timeout of 0 means
// gobreaker's default of 60s.
//
// The Guard's Classifier decides what failed and what says nothing
// (sluice.WithClassifier: Failure, Ignored): gobreaker never sees the
// call's error, so st.IsSuccessful and st.IsExcluded, which would judge
// only the Policy's own, are an error, and so is a BucketPeriod that does
// not divide the Interval (none: gobreaker would count for good; one that
// does not divide it, it would stretch to whole buckets).
func New(st gobreaker.Settings) (*Policy, error) {
	const maxBuckets = 1 << 16
	switch {
	case st.Timeout < 0 || st.Interval < 0 || st.BucketPeriod < 0:
		return nil, errors.New("gobreakeradapter: New: negative Timeout, Interval or BucketPeriod")
	case st.IsSuccessful != nil || st.IsExcluded != nil:
		return nil, errors.New("gobreakeradapter: New: IsSuccessful and IsExcluded never see the call's error: classify calls with the Guard's sluice.WithClassifier (Failure, Ignored) instead")
	case st.BucketPeriod > 0 && st.Interval == 0:
		return nil, errors.New("gobreakeradapter: New: BucketPeriod without Interval: gobreaker would count for good; give the Interval the buckets divide")
	case st.BucketPeriod > 0 && st.Interval%st.BucketPeriod != 0:
		// gobreaker rounds the Interval up to whole buckets: a BucketPeriod
		// of a minute makes an Interval of a second remember a minute.
		return nil, fmt.Errorf("gobreakeradapter: New: BucketPeriod %v does not divide Interval %v: gobreaker would stretch the window to whole buckets", st.BucketPeriod, st.Interval)
	case st.BucketPeriod > 0 && st.Interval/st.BucketPeriod > maxBuckets:
		// gobreaker makes every bucket up front: a unit left off (10 ns
		// buckets in a minute) would ask for gigabytes.
		return nil, fmt.Errorf("gobreakeradapter: New: Interval %v in buckets of %v is %d buckets; at most %d", st.Interval, st.BucketPeriod, st.Interval/st.BucketPeriod, maxBuckets)
	}
	p := newPolicy(st.Name)
	p.timeout = st.Timeout
	if p.timeout == 0 {
		p.timeout = 60 * time.Second
	}
	user := st.OnStateChange
	st.OnStateChange = func(name string, from, to gobreaker.State) {
		if to == gobreaker.StateOpen {
			t := time.Now()
			p.openedAt.Store(&t)
		}
		p.events.queue(sluice.StateChange{Policy: p.name, From: from.String(), To: to.String(), At: monoclock.Now()})
		if user != nil {
			user(name, from, to)
		}
	}
	st.IsExcluded = func(err error) bool { return errors.Is(err, errExcluded) }
	if trip := st.ReadyToTrip; trip != nil {
		st.ReadyToTrip = func(c gobreaker.Counts) bool {
			c.Requests -= min(c.TotalExclusions, c.Requests)
			return trip(c)
		}
	}
	p.cb = gobreaker.NewTwoStepCircuitBreaker[any](st)
	return p, nil
}

func newPolicy(name string) *Policy {
	if name == "" {
		name = "gobreaker"
	}
	return &Policy{name: "breaker/" + name, pending: make(map[sluice.Ticket]func(error))}
}

// Name returns "breaker/" followed by the gobreaker breaker's name, or
// "breaker/gobreaker" when it has none.
func (p *Policy) Name() string { return p.name }

// Breaker returns the wrapped gobreaker breaker, for its State and Counts.
func (p *Policy) Breaker() *gobreaker.TwoStepCircuitBreaker[any] { return p.cb }

// Admit asks the gobreaker breaker. It is the sluice.Policy method; gobreaker
// reads its own wall clock, so now is not used.
func (p *Policy) Admit(_ context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if held := time.Duration(p.held.Load()); now < held {
		retry := held - now
		st := p.cb.State() // which may move it on, past its Timeout
		p.events.dispatch()
		if st == gobreaker.StateOpen { // and open for longer, maybe
			retry = max(retry, p.retryAfter(gobreaker.ErrOpenState))
		}
		return 0, sluice.Quota{Limit: -1, RetryAfter: retry}, sluice.ErrCircuitOpen
	}
	t, err := p.allow()
	if err != nil {
		return 0, sluice.Quota{Limit: -1, RetryAfter: p.retryAfter(err)}, sluice.ErrCircuitOpen
	}
	return t, sluice.Quota{Limit: -1}, nil
}

// allow asks gobreaker, and on an admission returns the ticket under which
// its done function waits for Done.
func (p *Policy) allow() (sluice.Ticket, error) {
	done, err := p.cb.Allow()
	if err != nil {
		p.events.dispatch()
		return 0, err
	}
	delivered := false
	defer func() {
		if !delivered {
			// A listener panicked: the call will not run, so gobreaker gets
			// its slot (a half-open probe's) back.
			done(errExcluded)
		}
	}()
	p.events.dispatch()
	delivered = true
	p.mu.Lock()
	p.next++
	t := p.next
	p.pending[t] = done
	p.mu.Unlock()
	return t, nil
}

// OpenFor rejects every call from the instant now, on the Guard's clock,
// for at least d, as a dependency's Retry-After asks (sluicehttp.Transport
// and the gRPC client interceptors call it); d ≤ 0 asks nothing. The
// Policy holds the calls off in front of gobreaker, which is not told:
// its state and counts stay as they were.
func (p *Policy) OpenFor(_ context.Context, now, d time.Duration) {
	if d <= 0 {
		return
	}
	until := int64(now) + int64(d)
	if until < int64(now) { // past the clock's range
		until = math.MaxInt64
	}
	for {
		cur := p.held.Load()
		if cur >= until || p.held.CompareAndSwap(cur, until) {
			return
		}
	}
}

var _ sluice.Opener = (*Policy)(nil)

func init() {
	breakerview.Register(func(p any) (breakerview.Breaker, bool) {
		gp, ok := p.(*Policy)
		return view{gp}, ok
	})
}

// view is what the dashboard and the metrics read of a Policy, as they
// read a breaker.Breaker (see internal/breakerview).
type view struct{ p *Policy }

// State is gobreaker's state, or open while OpenFor holds the Policy
// (read on the system clock, every Guard's unless given another).
func (v view) State() breaker.State {
	st := v.p.cb.State() // which may move it on, past its Timeout
	v.p.events.dispatch()
	if v.p.heldFor() > 0 {
		return breaker.StateOpen
	}
	switch st {
	case gobreaker.StateOpen:
		return breaker.StateOpen
	case gobreaker.StateHalfOpen:
		return breaker.StateHalfOpen
	}
	return breaker.StateClosed
}

// Counts are gobreaker's, without the Ignored and Released calls: those of
// the window while closed, the probes' while half-open; and while open, the
// time left until a probe.
func (v view) Counts() breaker.Counts {
	st := v.p.cb.State() // first: reading the state clears a window gone by
	v.p.events.dispatch()
	c := v.p.cb.Counts()
	counted := int64(c.Requests) - int64(min(c.TotalExclusions, c.Requests))
	var out breaker.Counts
	switch st {
	case gobreaker.StateClosed:
		out = breaker.Counts{Requests: counted, Successes: int64(c.TotalSuccesses), Failures: int64(c.TotalFailures),
			ConsecutiveFailures: int64(c.ConsecutiveFailures)}
	case gobreaker.StateHalfOpen:
		out = breaker.Counts{ProbesAdmitted: counted, ProbeSuccesses: int64(c.TotalSuccesses), ProbeFailures: int64(c.TotalFailures)}
	case gobreaker.StateOpen:
		out.NextProbe = v.p.retryAfter(gobreaker.ErrOpenState)
	}
	out.NextProbe = max(out.NextProbe, v.p.heldFor())
	return out
}

// heldFor returns how long OpenFor still holds the Policy open, on the
// system clock.
func (p *Policy) heldFor() time.Duration {
	return max(time.Duration(p.held.Load())-monoclock.Now(), 0)
}

func (p *Policy) retryAfter(err error) time.Duration {
	if errors.Is(err, gobreaker.ErrOpenState) {
		if at := p.openedAt.Load(); at != nil {
			if left := p.timeout - time.Since(*at); left > 0 {
				return left
			}
			return time.Millisecond
		}
	}
	// Half-open with every probe taken, or opened before we could know:
	// the open duration bounds the wait.
	return p.timeout
}

// Needs returns 0: gobreaker keeps its own time, and Done passes on only
// the outcome.
func (p *Policy) Needs() sluice.Needs { return 0 }

// Done reports the outcome to gobreaker: Success as a nil error, Failure as
// an error of the Policy's, Ignored and Released as an error that New
// excluded. It is the sluice.Policy method.
func (p *Policy) Done(t sluice.Ticket, o sluice.Outcome, _, _ time.Duration) {
	p.mu.Lock()
	done := p.pending[t]
	delete(p.pending, t)
	p.mu.Unlock()
	if done == nil {
		return
	}
	switch o {
	case sluice.Success:
		done(nil)
	case sluice.Failure:
		done(errFailure)
	default:
		done(errExcluded)
	}
	p.events.dispatch()
}

// Subscribe registers fn, called after each state change of the breaker,
// outside gobreaker's lock, in order. It implements sluice.StateSource.
func (p *Policy) Subscribe(fn func(sluice.StateChange)) (unsubscribe func()) {
	if fn == nil {
		return func() {}
	}
	return p.events.add(fn)
}

var (
	_ sluice.Policy      = (*Policy)(nil)
	_ sluice.StateSource = (*Policy)(nil)
)

// events queues state changes heard under gobreaker's lock and delivers them
// once the Policy's call into gobreaker has returned, one at a time and in
// order.
type events struct {
	mu         sync.Mutex
	pending    []sluice.StateChange
	delivering bool
	subs       map[int]func(sluice.StateChange)
	order      []int
	nextID     int
}

func (e *events) queue(c sluice.StateChange) {
	e.mu.Lock()
	e.pending = append(e.pending, c)
	e.mu.Unlock()
}

func (e *events) add(fn func(sluice.StateChange)) func() {
	e.mu.Lock()
	if e.subs == nil {
		e.subs = make(map[int]func(sluice.StateChange))
	}
	e.nextID++
	id := e.nextID
	e.subs[id] = fn
	e.order = append(e.order, id)
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if _, ok := e.subs[id]; !ok {
			return
		}
		delete(e.subs, id)
		for i, x := range e.order {
			if x == id {
				e.order = append(e.order[:i:i], e.order[i+1:]...)
				break
			}
		}
	}
}

func (e *events) dispatch() {
	e.mu.Lock()
	if e.delivering || len(e.pending) == 0 {
		e.mu.Unlock()
		return
	}
	e.delivering = true
	e.mu.Unlock()
	// A listener that panics must not keep the others, or the changes
	// queued behind, from being heard: its panic is raised once they are.
	var first listen.First
	finished := false
	defer func() {
		if !finished { // a listener's runtime.Goexit: let the next change deliver
			e.mu.Lock()
			e.delivering = false
			e.mu.Unlock()
		}
	}()
	for {
		e.mu.Lock()
		if len(e.pending) == 0 {
			e.pending = nil
			e.delivering = false
			finished = true
			e.mu.Unlock()
			first.Raise()
			return
		}
		c := e.pending[0]
		e.pending = e.pending[1:]
		fns := make([]func(sluice.StateChange), 0, len(e.subs))
		for _, id := range e.order {
			if fn, ok := e.subs[id]; ok {
				fns = append(fns, fn)
			}
		}
		e.mu.Unlock()
		for _, fn := range fns {
			first.Call(fn, c)
		}
	}
}
