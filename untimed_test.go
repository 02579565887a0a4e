package sluice_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

// endSpy admits everything and keeps the end instants and latencies Done
// hears; it is sluice.UntimedDone when untimed.
type endSpy struct {
	name    string
	untimed bool
	mu      sync.Mutex
	ends    []time.Duration
	lats    []time.Duration
}

func (p *endSpy) Name() string { return p.name }
func (p *endSpy) Admit(context.Context, time.Duration) (sluice.Decision, sluice.Ticket) {
	return sluice.Decision{Allowed: true, Policy: p.name, Limit: -1}, 1
}
func (p *endSpy) Done(_ sluice.Ticket, _ sluice.Outcome, now, latency time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ends = append(p.ends, now)
	p.lats = append(p.lats, latency)
}
func (p *endSpy) UntimedOf() sluice.Policy {
	if p.untimed {
		return p
	}
	return nil
}

func (p *endSpy) last() (time.Duration, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ends[len(p.ends)-1], p.lats[len(p.lats)-1]
}

// timedEmbed inherits UntimedOf from the spy it embeds but has a Done of its
// own, which may want the time.
type timedEmbed struct{ *endSpy }

func (e timedEmbed) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	e.endSpy.Done(t, o, now, latency)
}

func TestIsUntimed(t *testing.T) {
	assert.True(t, sluice.IsUntimed(&endSpy{untimed: true}))
	assert.False(t, sluice.IsUntimed(&endSpy{}), "UntimedOf returns nil")
	assert.False(t, sluice.IsUntimed(timedEmbed{&endSpy{untimed: true}}), "inherited from an embedded policy")
	assert.False(t, sluice.IsUntimed(&recorder{}), "not an UntimedDone")
}

func TestGuardReadsNoEndInstantWhenNoPolicyNeedsIt(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	a, b := &endSpy{name: "a", untimed: true}, &endSpy{name: "b", untimed: true}
	g, err := sluice.New(sluice.With(a, b))
	require.NoError(t, err)

	for _, fn := range []func(context.Context) error{
		func(context.Context) error { return nil },
		func(context.Context) error { return boom },
		func(context.Context) error { return context.Canceled },
	} {
		_ = g.Do(ctx, fn)
		for _, p := range []*endSpy{a, b} {
			end, lat := p.last()
			assert.Equal(t, sluice.Unread, end, p.name)
			assert.Zero(t, lat, p.name)
		}
	}
	// Released comes with the instant read, and the latency since admission.
	_, done, err := g.Admit(ctx)
	require.NoError(t, err)
	before := sluice.Now()
	done.Record(sluice.Released)
	for _, p := range []*endSpy{a, b} {
		end, lat := p.last()
		assert.GreaterOrEqual(t, end, before, p.name)
		assert.GreaterOrEqual(t, lat, time.Duration(0), p.name)
	}

	// One policy that needs the time, a policy's own Done over an inherited
	// UntimedOf, or a clock of the Guard's own: the end instant is read.
	manual := sluice.NewManualClock(time.Hour)
	for name, opts := range map[string][]sluice.Option{
		"a timed policy":     {sluice.With(a, &endSpy{name: "timed"})},
		"an embedding Done":  {sluice.With(a, timedEmbed{&endSpy{name: "embed", untimed: true}})},
		"the Guard's clock":  {sluice.With(a), sluice.WithClock(manual)},
		"untimed, then more": {sluice.With(a), sluice.With(&endSpy{name: "late"})},
	} {
		g, err := sluice.New(opts...)
		require.NoError(t, err, name)
		require.NoError(t, g.Do(ctx, func(context.Context) error { return nil }), name)
		end, _ := a.last()
		assert.NotEqual(t, sluice.Unread, end, name)
		assert.GreaterOrEqual(t, end, time.Duration(0), name)
	}
}
