// Package policytest is the conformance suite every sluice.Policy runs: the
// contract of Decision fields, Done once per admit, Released giving back what
// Admit took, and safety under -race with many goroutines.
//
//	func TestConformance(t *testing.T) {
//		policytest.Run(t, policytest.Config{
//			New: func(t *testing.T) sluice.Policy { return mustNewLimiter(t) },
//		})
//	}
package policytest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/reqid"
)

// Config describes the policy under test.
type Config struct {
	// New returns a fresh policy. Required. Policies that block in Admit are
	// driven with a context whose deadline is already near, so they must not
	// wait past it.
	New func(t *testing.T) sluice.Policy
	// Step is how far the instant advances between two Admits in the
	// sequential checks; default 1 ms.
	Step time.Duration
	// Start is the first instant; default 0.
	Start time.Duration
	// NoRetryAfter marks policies that cannot know when to retry (a
	// probabilistic throttle): their rejections may carry RetryAfter 0.
	NoRetryAfter bool
	// Random marks policies whose decisions are random: Released is not
	// checked for restoring the decision exactly.
	Random bool
	// RemainingSlack is how far Remaining may be, after a release, from what
	// it was before, for policies that read a clock of their own (Redis's),
	// which moves between the two decisions and may cross a refill or a
	// window's end; default 0.
	RemainingSlack int64
	// WallClock marks policies that read the wall clock rather than the
	// instants they are given (a breaker of another library): two of them
	// driven alike need not decide alike, so UntimedAgrees checks each
	// decision against the contract only.
	WallClock bool
	// UntimedReadsClock marks policies that declare no sluice.NeedsEnd and,
	// told latency -1, read SystemClock when an outcome changes their state
	// (a breaker that trips): on the suite's made-up instants such a policy
	// cannot decide exactly as its twin told them, so UntimedAgrees checks
	// its decisions against the contract only.
	UntimedReadsClock bool
	// Causes lists the causes the policy rejects with; default all of
	// sluice's. Each rejection must match one of them.
	Causes []error
	// Outcome picks the outcome reported for the i-th admitted call in the
	// sequential and concurrent runs; default: a Failure every 7th call, the
	// rest Success.
	Outcome func(i int) sluice.Outcome
	// Latency is the latency reported to Done; default 1 ms.
	Latency time.Duration
}

func (c *Config) defaults() {
	if c.Step <= 0 {
		c.Step = time.Millisecond
	}
	if len(c.Causes) == 0 {
		c.Causes = []error{sluice.ErrRateLimited, sluice.ErrCircuitOpen, sluice.ErrOverloaded,
			sluice.ErrConcurrencyLimited, sluice.ErrTimeout}
	}
	if c.Outcome == nil {
		c.Outcome = func(i int) sluice.Outcome {
			if i%7 == 6 {
				return sluice.Failure
			}
			return sluice.Success
		}
	}
	if c.Latency <= 0 {
		c.Latency = time.Millisecond
	}
}

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.New == nil {
		t.Fatal("policytest: Config.New is required")
	}
	cfg.defaults()
	t.Run("Name", func(t *testing.T) {
		if cfg.New(t).Name() == "" {
			t.Fatal("Name() is empty")
		}
	})
	t.Run("DecisionFields", func(t *testing.T) { sequential(t, cfg) })
	t.Run("ReleasedRestores", func(t *testing.T) { released(t, cfg) })
	t.Run("Concurrent", func(t *testing.T) { concurrent(t, cfg) })
	t.Run("Needs", func(t *testing.T) { needs(t, cfg) })
	t.Run("ThroughGuard", func(t *testing.T) { throughGuard(t, cfg, false) })
	t.Run("ThroughGuardBeginEnd", func(t *testing.T) { throughGuard(t, cfg, true) })
	if cfg.New(t).Needs()&sluice.NeedsEnd == 0 {
		t.Run("UntimedAgrees", func(t *testing.T) { untimedAgrees(t, cfg) })
	}
}

// Admit calls p.Admit and returns the Decision its answer stands for, as
// a Guard builds it, and its Ticket.
func Admit(ctx context.Context, p sluice.Policy, now time.Duration) (sluice.Decision, sluice.Ticket) {
	t, q, cause := p.Admit(ctx, now)
	return sluice.Decision{Allowed: cause == nil, Policy: p.Name(), Limit: q.Limit,
		Remaining: q.Remaining, Reset: q.Reset, RetryAfter: q.RetryAfter, Cause: cause}, t
}

// needs checks that the policy declares only the flags sluice knows, and
// the same ones each time it is asked.
func needs(t *testing.T, cfg Config) {
	p := cfg.New(t)
	n := p.Needs()
	if n&^(sluice.NeedsEnd|sluice.Waits|sluice.NeedsResource) != 0 {
		t.Fatalf("Needs() = %#x declares flags sluice does not know", n)
	}
	if m := p.Needs(); m != n {
		t.Fatalf("Needs() = %#x, then %#x", n, m)
	}
	if n&sluice.NeedsResource != 0 {
		return
	}
	// A policy that reads the call's resource declares it: a client adapter
	// names the resource only for a Guard that reads it.
	read := false
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	spy := resourceSpy{Context: sluice.WithResource(ctx, "/svc/Method"), read: &read}
	now := cfg.Start
	for i := range 20 {
		tk, _, cause := p.Admit(spy, now)
		now += cfg.Step
		if cause == nil {
			p.Done(tk, cfg.Outcome(i), now, cfg.Latency)
		}
	}
	if read {
		t.Fatal("Admit or Done reads the call's resource, and Needs() does not declare sluice.NeedsResource")
	}
}

// resourceSpy notes whether the call's resource is read from it.
type resourceSpy struct {
	context.Context
	read *bool
}

func (s resourceSpy) Value(k any) any {
	if reqid.IsResourceKey(k) {
		*s.read = true
	}
	return s.Context.Value(k)
}

// untimedAgrees drives two fresh policies that declare no sluice.NeedsEnd
// through the same calls, one told the end instant and the latency of every
// call, the other told, for every outcome but Released, the instant of
// admission and latency -1, as a Guard that skips the end clock read does,
// and requires the same decisions, unless the policies are random or read
// the wall clock.
func untimedAgrees(t *testing.T, cfg Config) {
	b := cfg.New(t)
	a := cfg.New(t)
	ctx, cancel := admitCtx(t)
	defer cancel()
	now := cfg.Start
	admitted := 0
	// Two policies that read a clock of their own (Redis's: RemainingSlack)
	// see it move between their calls, and are twins by their Name only if
	// they share one.
	exact := !cfg.UntimedReadsClock && !cfg.Random && !cfg.WallClock && cfg.RemainingSlack == 0
	for i := range 2000 {
		if i%20 == 0 {
			now += 20 * cfg.Step
		}
		da, ta := Admit(ctx, a, now)
		db, tb := Admit(ctx, b, now)
		CheckDecision(t, cfg, b, db)
		if exact && da != db {
			t.Fatalf("call %d at %v: told the end instants %+v, told latency -1 %+v", i, now, da, db)
		}
		o := cfg.Outcome(admitted)
		if i%11 == 5 {
			o = sluice.Released
		}
		if da.Allowed {
			a.Done(ta, o, now+cfg.Latency, cfg.Latency)
		}
		if db.Allowed {
			if o == sluice.Released {
				b.Done(tb, o, now+cfg.Latency, cfg.Latency)
			} else {
				b.Done(tb, o, now, -1)
			}
			admitted++
		}
	}
}

func admitCtx(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), 50*time.Millisecond)
}

// CheckDecision fails t when d breaks the Decision contract for policy p.
func CheckDecision(t testing.TB, cfg Config, p sluice.Policy, d sluice.Decision) {
	t.Helper()
	if d.Policy != p.Name() {
		t.Fatalf("Decision.Policy = %q, want the policy's Name %q", d.Policy, p.Name())
	}
	if d.Remaining < 0 {
		t.Fatalf("Decision.Remaining = %d, must not be negative: %+v", d.Remaining, d)
	}
	if d.Limit < -1 {
		t.Fatalf("Decision.Limit = %d, must be -1 or a quota: %+v", d.Limit, d)
	}
	if d.Limit >= 0 && d.Remaining > d.Limit {
		t.Fatalf("Decision.Remaining %d > Limit %d: %+v", d.Remaining, d.Limit, d)
	}
	if d.Limit == -1 && d.Remaining != 0 {
		t.Fatalf("Decision.Remaining = %d with Limit -1, want 0: %+v", d.Remaining, d)
	}
	if d.Reset < 0 || d.RetryAfter < 0 {
		t.Fatalf("negative Reset or RetryAfter: %+v", d)
	}
	if d.Allowed {
		if d.RetryAfter != 0 {
			t.Fatalf("allowed with RetryAfter %v: %+v", d.RetryAfter, d)
		}
		if d.Cause != nil {
			t.Fatalf("allowed with Cause %v: %+v", d.Cause, d)
		}
		return
	}
	if d.Cause == nil {
		t.Fatalf("rejected without a Cause: %+v", d)
	}
	matched := false
	for _, c := range cfg.Causes {
		if errors.Is(d.Cause, c) {
			matched = true
		}
	}
	if !matched {
		t.Fatalf("rejection Cause %v matches none of %v", d.Cause, cfg.Causes)
	}
	if !cfg.NoRetryAfter && d.RetryAfter <= 0 {
		t.Fatalf("rejected with RetryAfter %v, want > 0: %+v", d.RetryAfter, d)
	}
}

func sequential(t *testing.T, cfg Config) {
	p := cfg.New(t)
	ctx, cancel := admitCtx(t)
	defer cancel()
	now := cfg.Start
	admitted, rejected := 0, 0
	for i := range 2000 {
		// Bursts of 20 at one instant, then a step: both sides of every quota.
		if i%20 == 0 {
			now += 20 * cfg.Step
		}
		d, tk := Admit(ctx, p, now)
		CheckDecision(t, cfg, p, d)
		if d.Allowed {
			p.Done(tk, cfg.Outcome(admitted), now+cfg.Latency, cfg.Latency)
			admitted++
		} else {
			rejected++
		}
	}
	if admitted == 0 {
		t.Fatalf("2000 calls over %v admitted none", now-cfg.Start)
	}
	t.Logf("admitted %d, rejected %d", admitted, rejected)
}

func released(t *testing.T, cfg Config) {
	p := cfg.New(t)
	ctx, cancel := admitCtx(t)
	defer cancel()
	now := cfg.Start
	for i := range 200 {
		if i%10 == 0 {
			now += cfg.Step
		}
		d1, t1 := Admit(ctx, p, now)
		if !d1.Allowed {
			continue
		}
		p.Done(t1, sluice.Released, now, 0)
		d2, t2 := Admit(ctx, p, now)
		if !d2.Allowed {
			if cfg.Random {
				continue
			}
			t.Fatalf("call %d: admitted, released, then rejected at the same instant: %+v then %+v", i, d1, d2)
		}
		if !cfg.Random && (d2.Remaining < d1.Remaining-cfg.RemainingSlack || d2.Remaining > d1.Remaining+cfg.RemainingSlack) {
			t.Fatalf("call %d: Remaining %d after a release, want %d as before", i, d2.Remaining, d1.Remaining)
		}
		p.Done(t2, cfg.Outcome(i), now+cfg.Latency, cfg.Latency)
	}
}

// concurrent drives one policy from 32 goroutines at once, for -race to
// watch, and requires every decision to keep the contract.
func concurrent(t *testing.T, cfg Config) {
	p := cfg.New(t)
	var clock atomic.Int64
	clock.Store(int64(cfg.Start))
	const workers, calls = 32, 400
	var wg sync.WaitGroup
	errc := make(chan string, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			ctx, cancel := admitCtx(t)
			defer cancel()
			for i := range calls {
				now := time.Duration(clock.Add(int64(cfg.Step / 8)))
				d, tk := Admit(ctx, p, now)
				if d.Policy != p.Name() || d.Remaining < 0 || (d.Allowed && (d.RetryAfter != 0 || d.Cause != nil)) || (!d.Allowed && d.Cause == nil) {
					errc <- "inconsistent decision under concurrency"
					return
				}
				if !d.Allowed {
					continue
				}
				o := cfg.Outcome(i)
				if r.IntN(10) == 0 {
					o = sluice.Released
				}
				lat := time.Duration(r.Int64N(int64(cfg.Latency)*2 + 1))
				p.Done(tk, o, time.Duration(clock.Load())+lat, lat)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for e := range errc {
		t.Fatal(e)
	}
}

// countingPolicy wraps a policy and counts Admits that allowed and Dones.
// Its Needs are the policy's, so that a Guard takes the same path for it.
type countingPolicy struct {
	sluice.Policy
	allowed, done atomic.Int64
}

func (c *countingPolicy) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	t, q, cause := c.Policy.Admit(ctx, now)
	if cause == nil {
		c.allowed.Add(1)
	}
	return t, q, cause
}

func (c *countingPolicy) Done(t sluice.Ticket, o sluice.Outcome, now, lat time.Duration) {
	c.done.Add(1)
	c.Policy.Done(t, o, now, lat)
}

// throughGuard runs 500 calls through a Guard of the policy, with Do or,
// when begin, with Begin and End, and requires every rejection to keep the
// Decision contract and every admission to be reported exactly once.
func throughGuard(t *testing.T, cfg Config, begin bool) {
	p := cfg.New(t)
	inner := &countingPolicy{Policy: p}
	clk := sluice.NewManualClock(cfg.Start)
	g, err := sluice.New(sluice.With(inner), sluice.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := admitCtx(t)
	defer cancel()
	ran := 0
	fn := func(i int) func(context.Context) error {
		return func(context.Context) error {
			ran++
			if cfg.Outcome(i) == sluice.Failure {
				return errors.New("dependency failed")
			}
			return nil
		}
	}
	for i := range 500 {
		if i%10 == 0 {
			clk.Advance(cfg.Step * 10)
		}
		var err error
		if begin {
			var call sluice.Call
			berr := g.Begin(ctx, &call)
			d := call.Decision()
			if d.Allowed != (berr == nil) {
				t.Fatalf("Begin returned %v with Decision %+v", berr, d)
			}
			if !d.Allowed || d.Limit >= 0 {
				CheckDecision(t, cfg, inner, d)
			} else if d.Policy != "" || d.Remaining != 0 || d.Cause != nil || d.RetryAfter != 0 {
				t.Fatalf("admitted without a quota, Decision %+v", d)
			}
			if berr == nil {
				berr = fn(i)(call.Context())
			} else if rd, ok := sluice.RejectionOf(berr); !ok {
				t.Fatalf("Begin's rejection %v is none for RejectionOf", berr)
			} else if rd.Policy != d.Policy || rd.Cause != d.Cause || rd.Limit != d.Limit || rd.Remaining != d.Remaining ||
				rd.RetryAfter < d.RetryAfter || rd.RetryAfter >= d.RetryAfter+time.Millisecond {
				// Read at the instant of the rejection, the shared error's
				// RetryAfter is the Decision's rounded up to the millisecond.
				t.Fatalf("Begin's rejection reads %+v, its Decision is %+v", rd, d)
			}
			err = call.End(berr)
			if again := call.End(nil); again != nil {
				t.Fatalf("End after End with nil = %v, want nil", again)
			}
		} else {
			err = g.Do(ctx, fn(i))
		}
		if d, ok := sluice.RejectionOf(err); ok {
			if !errors.Is(err, sluice.ErrRejected) {
				t.Fatalf("rejection %v does not match ErrRejected", err)
			}
			if !errors.Is(err, d.Cause) {
				t.Fatalf("rejection %v does not match its Cause %v", err, d.Cause)
			}
			CheckDecision(t, cfg, inner, d)
		} else if errors.Is(err, sluice.ErrRejected) {
			t.Fatalf("%v matches ErrRejected, but RejectionOf finds none", err)
		}
	}
	if got := inner.allowed.Load(); got != int64(ran) || inner.done.Load() != got {
		t.Fatalf("fn ran %d times, policy allowed %d and heard Done %d", ran, got, inner.done.Load())
	}
}

// Answer is what a policy's Admit returned, in one value, for tests that
// keep or compare it.
type Answer struct {
	Ticket sluice.Ticket
	sluice.Quota
	Cause error
}

// AnswerOf returns Admit's three results as an Answer:
// AnswerOf(p.Admit(ctx, now)).
func AnswerOf(t sluice.Ticket, q sluice.Quota, cause error) Answer {
	return Answer{Ticket: t, Quota: q, Cause: cause}
}
