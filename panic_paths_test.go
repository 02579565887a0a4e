package sluice_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// scriptedPolicy is a scriptable policy: it rejects with reject (when set), panics
// in Done when doneBoom says so, and records what it hears.
type scriptedPolicy struct {
	name     string
	reject   error
	ticket   sluice.Ticket
	needs    sluice.Needs
	doneBoom func(sluice.Outcome) bool

	mu       sync.Mutex
	admitted int
	done     []sluice.Outcome
}

func (p *scriptedPolicy) Name() string        { return p.name }
func (p *scriptedPolicy) Needs() sluice.Needs { return p.needs }
func (p *scriptedPolicy) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if p.reject != nil {
		return p.ticket, sluice.Quota{Limit: -1, RetryAfter: time.Second}, p.reject
	}
	p.mu.Lock()
	p.admitted++
	p.mu.Unlock()
	return p.ticket, sluice.Quota{Limit: -1}, nil
}
func (p *scriptedPolicy) Done(_ sluice.Ticket, o sluice.Outcome, _, _ time.Duration) {
	p.mu.Lock()
	p.done = append(p.done, o)
	p.mu.Unlock()
	if p.doneBoom != nil && p.doneBoom(o) {
		panic("done: a Done that panics")
	}
}
func (p *scriptedPolicy) outcomes() []sluice.Outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sluice.Outcome(nil), p.done...)
}

type countingObserver struct {
	mu       sync.Mutex
	events   []sluice.CallEvent
	detached int
}

func (o *countingObserver) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return func(_ context.Context, e sluice.CallEvent) {
			o.mu.Lock()
			o.events = append(o.events, e)
			o.mu.Unlock()
		}, func() {
			o.mu.Lock()
			o.detached++
			o.mu.Unlock()
		}, nil
}

// The two-step path (Begin, run, End) with a Guard whose Classifier panics
// does not leave the call admitted, as Do and Execute do not: no
// concurrency slot or half-open probe leaks, and the Call can be begun
// again.
func TestEndWithAPanickingClassifierEndsTheCall(t *testing.T) {
	p := &scriptedPolicy{name: "p"}
	g, err := sluice.New(sluice.With(p), sluice.WithClassifier(func(err error) sluice.Outcome {
		panic("classifier bug")
	}))
	if err != nil {
		t.Fatal(err)
	}
	var call sluice.Call
	if err := g.Begin(context.Background(), &call); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = call.End(errors.New("boom"))
	}()
	if got := p.outcomes(); len(got) != 1 {
		t.Errorf("the policy heard %v of the call whose classification panicked; want one end (Failure), as Do gives it", got)
	}
	// The Call should be reusable once its End has run.
	if err := g.Begin(context.Background(), &call); err != nil {
		t.Errorf("Begin on the Call after its End: %v", err)
	}
}

// A Done that panics while the policies before a rejecting one are
// released does not lose the rejection: it is counted and observed, as
// Report counts a call's end whatever the policies do.
func TestAPanicInAReleaseKeepsTheRejection(t *testing.T) {
	outer := &scriptedPolicy{name: "outer", doneBoom: func(o sluice.Outcome) bool { return o == sluice.Released }}
	inner := &scriptedPolicy{name: "inner", reject: sluice.ErrRateLimited}
	obs := &countingObserver{}
	g, err := sluice.New(sluice.With(outer, inner), sluice.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = g.Do(context.Background(), func(context.Context) error { return nil })
	}()
	st := g.Stats()
	if n := st.Policies[1].Rejected[sluice.CauseRateLimited]; n != 1 {
		t.Errorf("inner's rate-limited rejections: %d, want 1 (the policy did reject the call)", n)
	}
	if st.Policies[0].Outcomes[sluice.Released] != 1 {
		t.Errorf("outer's Released: %d, want 1 (it was told Released)", st.Policies[0].Outcomes[sluice.Released])
	}
	obs.mu.Lock()
	n := len(obs.events)
	obs.mu.Unlock()
	if n != 1 {
		t.Errorf("observer heard %d events, want the rejection", n)
	}
}
