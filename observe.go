package sluice

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sluice-go/sluice/internal/isnil"
)

// WithName names the Guard, for the observers that report it (metrics, logs)
// and for its Stats. Names are the Guard's identity to an operator: give
// each Guard of a service its own. The default is no name, which an
// [Observer] may refuse. name must not be empty.
func WithName(name string) Option {
	return func(g *Guard) error {
		if name == "" {
			return errors.New("sluice: WithName: empty name")
		}
		if !utf8.ValidString(name) {
			return fmt.Errorf("sluice: WithName: %q is not valid UTF-8", name)
		}
		g.name = name
		return nil
	}
}

// Name returns the name given with [WithName]; "" when none was.
func (g *Guard) Name() string {
	if g == nil {
		return ""
	}
	return g.name
}

// Observer watches Guards: it is told how each of their calls ended, and
// may read a Guard's counters ([Guard.Stats]) and its policies whenever it
// likes. Packages of their own turn that into metrics and logs.
type Observer interface {
	// Attach is called by New once the Guard g is built. It returns the
	// function to tell, once per call, how a call through g ended (nil for
	// none), the function g's Close calls to let go of g (nil for none),
	// or an error, which New returns.
	//
	// observe hears a rejection when it is decided, and an admitted call
	// when End or Report ends it. It runs on the call's goroutine, outside
	// every lock, with the context the call began with; keep it short, and
	// do not keep e.Err past its return unless you mean to hold the call's
	// error.
	Attach(g *Guard) (observe func(ctx context.Context, e CallEvent), detach func(), err error)
}

// CallEvent is what an [Observer] hears of one call.
type CallEvent struct {
	// Admitted is true for a call that every policy admitted.
	Admitted bool
	// Policy names the policy that rejected the call; "" when Admitted.
	Policy string
	// Cause is the rejection's cause; CauseNone when Admitted, and for a
	// rejection whose cause is not one of sluice's.
	Cause Cause
	// Outcome is how an admitted call ended; Released for a rejection.
	Outcome Outcome
	// Err is the error the call ended with, after the Guard's timeout
	// mapping (a timeout error (matching [ErrTimeout])); nil when the caller reported the
	// outcome without one. For a rejection, the rejection.
	Err error
	// Wait is how long the call waited in the policies that may wait (a
	// shaper, a concurrency queue), the time the policies before each took
	// to decide included (nanoseconds in memory; a Redis limiter's round
	// trip): the Guard reads its clock after such a policy, not before it.
	// 0 in a Guard without one.
	Wait time.Duration
	// Latency is how long an admitted call ran, from the end of its
	// admission to its end; 0 for a rejection.
	Latency time.Duration
	// Shadow is true for an admitted call that a policy in shadow mode
	// ([Guard.SetShadow]) rejected: Policy names the first that did, and
	// Cause is its rejection's cause.
	Shadow bool
	// Decision is what the Guard decided on the call, as [Call.Decision]
	// tells it: for an admitted call, the quota of its policy with the
	// least Remaining (Limit -1 when none has a quota); for a rejection,
	// the rejecting policy's.
	Decision Decision
}

// WithObserver makes the Guard keep its counters and the durations of its
// calls ([Guard.Stats]), and tell o how each call ended. It may be given
// more than once. A Guard without one keeps no counters and pays nothing
// for observation: its call path checks one pointer.
//
// An observed Guard reads its clock at the end of every call, for the
// call's duration, even when no policy needs it ([NeedsEnd]).
func WithObserver(o Observer) Option {
	return func(g *Guard) error {
		if isnil.Of(o) {
			return errors.New("sluice: WithObserver: nil observer")
		}
		if g.obs == nil {
			g.obs = &observation{}
		}
		g.obs.observers = append(g.obs.observers, o)
		return nil
	}
}

// Stats is a snapshot of an observed Guard's counters, since it was built.
type Stats struct {
	// Guard is the Guard's name ([WithName]).
	Guard string
	// Policies holds the counters of each policy of the chain, outer to
	// inner.
	Policies []PolicyStats
	// Fallbacks counts the requests a fallback answered instead of their
	// error, indexed by the [Cause] of the error it replaced (CauseNone: a
	// failure of the call that was no timeout).
	Fallbacks [numCauses]uint64
	// Attempts, Retries and BudgetRefusals count, for a Guard that declares
	// retries ([WithRetry]), whether observed or not: its calls, retries
	// included; the retries it granted; and those its retry budget refused.
	Attempts, Retries, BudgetRefusals uint64
	// Shadowed is true while the whole Guard is in shadow mode
	// ([Guard.SetShadow] with policy "", or [WithShadow]("")).
	Shadowed bool
	// Durations counts the durations of the calls every policy admitted,
	// from the end of their admission to their end ([CallEvent].Latency),
	// by [Outcome]; the failures whose error is [ErrTimeout] are counted
	// in Timeouts instead of Durations[Failure].
	Durations [Released + 1]Histogram
	// Timeouts counts the durations of the failed calls whose error is
	// [ErrTimeout] (errors.Is).
	Timeouts Histogram
}

// Histogram counts durations in buckets: Counts[i] those above the bound
// before i (of [Histogram.Bounds]) up to and including bound i, the last
// those above every bound. The bounds go from a millisecond to a minute.
type Histogram struct {
	// Counts holds the number of durations in each bucket.
	Counts [len(durationBounds) + 1]uint64
	// Sum is the sum of the durations counted.
	Sum time.Duration
}

// durationBounds are the upper bounds of a Histogram's buckets but the
// last: OpenTelemetry's advice for durations in seconds, from a
// millisecond up, with a minute on top for long calls.
var durationBounds = [...]time.Duration{
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second,
	10 * time.Second, 30 * time.Second, time.Minute,
}

// Bounds returns the upper bounds of the buckets of Counts but the last,
// in increasing order.
func (Histogram) Bounds() []time.Duration { return append([]time.Duration(nil), durationBounds[:]...) }

// count returns the number of durations h counted.
func (h *Histogram) count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// bucketOf returns the index in Histogram.Counts of the bucket of d. Most
// calls take less than the first bound, and leave at the first comparison.
func bucketOf(d time.Duration) int {
	i := 0
	for i < len(durationBounds) && d > durationBounds[i] {
		i++
	}
	return i
}

// numCauses is the number of Causes, CauseNone included.
const numCauses = int(CauseTimeout) + 1

// PolicyStats counts what one policy of a Guard decided and heard.
type PolicyStats struct {
	// Policy is the policy's Name.
	Policy string
	// Admitted counts the calls the policy admitted.
	Admitted uint64
	// Rejected counts the calls the policy rejected, indexed by the [Cause]
	// of the rejection (CauseNone: a cause that is not one of sluice's).
	Rejected [numCauses]uint64
	// Outcomes counts the calls the policy admitted that have ended,
	// indexed by [Outcome]: Released counts those an inner policy rejected.
	// Admitted less their sum is the policy's calls in flight.
	Outcomes [Released + 1]uint64
	// ShadowRejected counts the calls the policy rejected in shadow mode
	// ([Guard.SetShadow]) and let through; they count in Admitted and
	// Outcomes too, as calls it let pass.
	ShadowRejected uint64
	// Shadowed is true while the policy is in shadow mode, by its name or
	// as part of a shadowed Guard.
	Shadowed bool
}

// Stats returns the Guard's counters. A Guard built without [WithObserver]
// keeps none but its retry counters: its Stats has the policies' names and
// zero counts.
func (g *Guard) Stats() Stats {
	if g == nil {
		return Stats{}
	}
	s := Stats{Guard: g.name, Policies: make([]PolicyStats, len(g.policies))}
	g.shadowMu.Lock()
	s.Shadowed = g.shadowAll
	g.shadowMu.Unlock()
	shadowed := g.shadow.Load()
	for i := range s.Policies {
		s.Policies[i].Policy = g.names[i]
		s.Policies[i].Shadowed = i < maxShadowed && shadowed>>i&1 != 0
	}
	if r := g.retry; r != nil {
		s.Attempts, s.Retries, s.BudgetRefusals = r.attemptsMade(), r.retries.Load(), r.refusals.Load()
	}
	ob := g.obs
	if ob == nil {
		return s
	}
	g.countStats(&s, ob.load)
	return s
}

// countStats adds to s the counters that load reads by shard and slot: an
// observed Guard's, or a copy of them.
func (g *Guard) countStats(s *Stats, load func(shard, slot int) uint64) {
	ob := g.obs
	// The counters are kept per call and per rejecting policy; what each
	// policy admitted and released follows from them. A call every policy
	// admitted was admitted by each; one that policy j rejected was
	// admitted, then released, by the policies before j.
	// The outcomes are the counts of the durations' histograms.
	// Each count is read after those that a call adds to later, so that a
	// snapshot taken while calls run never shows more ended, or shadow
	// rejected, than admitted: the ends and the shadow rejections first,
	// the admissions last.
	for sh := range statShards {
		for k := range durationKinds {
			h := &s.Timeouts
			if k < len(s.Durations) {
				h = &s.Durations[k]
			}
			base := slotDurations + k*histSlots
			for b := range h.Counts {
				h.Counts[b] += load(sh, base+b)
			}
			h.Sum += time.Duration(load(sh, base+len(h.Counts)))
		}
		for c := range s.Fallbacks {
			s.Fallbacks[c] += load(sh, slotFallbacks+c)
		}
	}
	var outcomes [Released + 1]uint64
	for o := range outcomes {
		outcomes[o] = s.Durations[o].count()
	}
	outcomes[Failure] += s.Timeouts.count()
	for i := range s.Policies {
		p := &s.Policies[i]
		for sh := range statShards {
			p.ShadowRejected += load(sh, ob.slotShadow+i)
		}
	}
	var admitted uint64
	for sh := range statShards {
		admitted += load(sh, slotAdmitted)
	}
	rejectedAfter := uint64(0) // rejections by the policies inner to i
	for i := len(s.Policies) - 1; i >= 0; i-- {
		p := &s.Policies[i]
		for sh := range statShards {
			for c := range p.Rejected {
				p.Rejected[c] += load(sh, slotRejected+i*numCauses+c)
			}
		}
		p.Admitted = admitted + rejectedAfter
		p.Outcomes = outcomes
		p.Outcomes[Released] += rejectedAfter
		for _, n := range p.Rejected {
			rejectedAfter += n
		}
	}
}

// observation is an observed Guard's counters and observers. A Guard keeps a
// pointer to it, nil when unobserved: that nil is all an unobserved call
// pays.
type observation struct {
	observers  []Observer
	calls      []func(context.Context, CallEvent) // what the observers gave
	stride     int                                // counters per shard, a whole number of cache lines
	slotShadow int                                // the first of the shadow rejections by policy
	counts     []atomic.Uint64                    // statShards × stride
}

// The counters of a shard, by slot: the calls admitted by every policy,
// the fallbacks by cause, the histograms of the durations of the admitted
// calls by kind (each its bucket counts, then its sum in nanoseconds), then
// the rejections by policy and cause, then the shadow rejections by policy
// (slotShadow). An admitted call's end adds to two counters: one bucket
// and one sum; its outcome is the histogram it adds to.
const (
	slotAdmitted  = 0
	slotFallbacks = 1
	slotDurations = slotFallbacks + numCauses
	slotRejected  = slotDurations + durationKinds*histSlots
)

// The kinds of durations: one per Outcome, then the failures that were
// timeouts.
const (
	kindTimeout   = int(Released) + 1
	durationKinds = kindTimeout + 1
	histSlots     = len(durationBounds) + 2 // the buckets and the sum
)

// statShards spreads the counters over cache lines, so that calls on
// different cores rarely add to the same one.
const statShards = 8

func (ob *observation) init(policies int) {
	ob.slotShadow = slotRejected + policies*numCauses
	n := ob.slotShadow + policies
	ob.stride = (n + 7) &^ 7 // 8 counters: a cache line of 64 bytes
	ob.counts = make([]atomic.Uint64, statShards*ob.stride)
}

func (ob *observation) load(shard, slot int) uint64 {
	return ob.counts[shard*ob.stride+slot].Load()
}

// shardAt picks the shard of a call that arrived at now from the
// instant's low bits, which differ from call to call like random ones and
// cost nothing to read (a random number costs a few nanoseconds). The bits
// above are folded in for clocks whose resolution is coarser than a
// nanosecond; a clock that stands still (a ManualClock) puts every call
// in one shard, which is right all the same.
func shardAt(now time.Duration) uint8 {
	return uint8(now^now>>10^now>>20) & (statShards - 1)
}

// shard picks a shard at random, where no instant is at hand.
func shard() uint8 { return uint8(rand.Uint32() & (statShards - 1)) }

// add counts one at slot in a shard picked at random.
func (ob *observation) add(slot int) {
	ob.counts[int(shard())*ob.stride+slot].Add(1)
}

// addAt counts one at slot in the shard of the instant now.
func (ob *observation) addAt(slot int, now time.Duration) {
	ob.counts[int(shardAt(now))*ob.stride+slot].Add(1)
}

// admitted counts a call every policy admitted, in a shard its end will
// count in too: one cache line per call.
func (ob *observation) admitted(c *Call) {
	c.shard = shardAt(c.start)
	ob.counts[int(c.shard)*ob.stride+slotAdmitted].Add(1)
	if c.skip != 0 {
		ob.countShadows(c.skip, int(c.shard))
	}
}

// countShadows counts the shadow rejections of a call, the policies of
// skip, in shard: after the call's admission, or its rejection by a later
// policy, is counted, so that Stats, which reads them in the other order,
// never shows more shadow rejected than admitted. A call whose admission
// panicked counts neither.
func (ob *observation) countShadows(skip uint64, shard int) {
	for ; skip != 0; skip &= skip - 1 {
		ob.counts[shard*ob.stride+ob.slotShadow+bits.TrailingZeros64(skip)].Add(1)
	}
}

// ended counts the end of c, admitted by every policy, with o and err at
// now.
func (ob *observation) ended(c *Call, o Outcome, err error, now time.Duration) {
	lat := max(now-c.start, 0)
	k := int(o)
	if o == Failure && err != nil && errors.Is(err, ErrTimeout) {
		k = kindTimeout
	}
	h := ob.counts[int(c.shard)*ob.stride+slotDurations+k*histSlots:][:histSlots]
	h[bucketOf(lat)].Add(1)
	h[histSlots-1].Add(uint64(lat))
}

// tell reports the end of c, counted by ended, to the observers.
func (ob *observation) tell(c *Call, o Outcome, err error, now time.Duration) {
	lat := max(now-c.start, 0)
	e := CallEvent{Admitted: true, Outcome: o, Err: err, Wait: c.wait, Latency: lat, Decision: c.d}
	if c.skip != 0 {
		e.Shadow, e.Policy, e.Cause = true, c.g.names[c.shadowPolicy()], c.shadowCause
	}
	for _, fn := range ob.calls {
		fn(c.parent, e)
	}
}

// rejected counts and reports policy i's rejection at now of a call with
// cause and error err, after the call waited wait; d is the call's
// Decision, and skip the policies before i that rejected it in shadow
// mode, counted after the rejection and before the observers hear it.
func (ob *observation) rejected(ctx context.Context, g *Guard, i int, cause, err error, now, wait time.Duration, d *Decision, skip uint64) {
	cs := causeOf(cause)
	ob.addAt(slotRejected+i*numCauses+int(cs), now)
	if skip != 0 {
		ob.countShadows(skip, int(shardAt(now)))
	}
	if len(ob.calls) == 0 {
		return
	}
	e := CallEvent{Policy: g.names[i], Cause: cs, Outcome: Released, Err: err, Wait: wait, Decision: *d}
	for _, fn := range ob.calls {
		fn(ctx, e)
	}
}

// causeOf is CauseOf, with the sentinels themselves, which is what
// policies answer, found without unwrapping.
func causeOf(err error) Cause {
	switch err {
	case ErrRateLimited:
		return CauseRateLimited
	case ErrCircuitOpen:
		return CauseCircuitOpen
	case ErrOverloaded:
		return CauseOverloaded
	case ErrConcurrencyLimited:
		return CauseConcurrencyLimited
	case ErrTimeout:
		return CauseTimeout
	}
	return CauseOf(err)
}

// attach attaches the Guard's observers; on an error, it detaches those
// already attached.
func (g *Guard) attach() error {
	g.obs.init(len(g.policies))
	for _, o := range g.obs.observers {
		observe, detach, err := o.Attach(g)
		if err != nil {
			g.refused.Store(true) // before the observers let go of it
			for _, d := range g.unsubs {
				d()
			}
			g.unsubs = nil
			return err
		}
		if detach != nil {
			g.unsubs = append(g.unsubs, detach)
		}
		if observe != nil {
			g.obs.calls = append(g.obs.calls, observe)
		}
	}
	return nil
}
