package sluice_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
)

// endSpy admits everything and keeps the admission instants, and the end
// instants and latencies Done hears; it declares sluice.NeedsEnd unless
// untimed.
type endSpy struct {
	name    string
	untimed bool
	mu      sync.Mutex
	admits  []time.Duration
	ends    []time.Duration
	lats    []time.Duration
}

func (p *endSpy) Name() string { return p.name }
func (p *endSpy) Admit(_ context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.admits = append(p.admits, now)
	return 1, sluice.Quota{Limit: -1}, nil
}
func (p *endSpy) Done(_ sluice.Ticket, _ sluice.Outcome, now, latency time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ends = append(p.ends, now)
	p.lats = append(p.lats, latency)
}
func (p *endSpy) Needs() sluice.Needs {
	if p.untimed {
		return 0
	}
	return sluice.NeedsEnd
}

// last returns the instant of the last admission, and the end instant and
// latency of the last Done.
func (p *endSpy) last() (admit, end, lat time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.admits[len(p.admits)-1], p.ends[len(p.ends)-1], p.lats[len(p.lats)-1]
}

func TestGuardReadsNoEndInstantWhenNoPolicyNeedsIt(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	a, b := &endSpy{name: "a", untimed: true}, &endSpy{name: "b", untimed: true}
	g, err := sluice.New(sluice.With(a, b))
	require.NoError(t, err)

	for _, fn := range []func(context.Context) error{
		func(context.Context) error { return nil },
		func(context.Context) error { time.Sleep(time.Millisecond); return boom },
		func(context.Context) error { return context.Canceled },
	} {
		_ = g.Do(ctx, fn)
		for _, p := range []*endSpy{a, b} {
			admit, end, lat := p.last()
			assert.Equal(t, admit, end, "%s: the end instant is the admission's", p.name)
			assert.Equal(t, time.Duration(-1), lat, p.name)
		}
	}
	// Released comes with the instant read, and the latency since admission.
	var c sluice.Call
	err = g.Begin(ctx, &c)
	require.NoError(t, err)
	time.Sleep(time.Millisecond)
	before := monoclock.Now()
	require.NoError(t, c.Report(sluice.Released, nil))
	for _, p := range []*endSpy{a, b} {
		admit, end, lat := p.last()
		assert.GreaterOrEqual(t, end, before, p.name)
		assert.GreaterOrEqual(t, lat, time.Millisecond, p.name)
		assert.Equal(t, end-admit, lat, p.name)
	}

	// One policy that needs the time, or a clock of the Guard's own: the end
	// instant is read, and the latency measured.
	manual := sluice.NewManualClock(time.Hour)
	for name, opts := range map[string][]sluice.Option{
		"a timed policy":     {sluice.With(a, &endSpy{name: "timed"})},
		"the Guard's clock":  {sluice.With(a), sluice.WithClock(manual)},
		"untimed, then more": {sluice.With(a), sluice.With(&endSpy{name: "late"})},
	} {
		g, err := sluice.New(opts...)
		require.NoError(t, err, name)
		require.NoError(t, g.Do(ctx, func(context.Context) error {
			time.Sleep(time.Millisecond)
			manual.Advance(time.Millisecond)
			return nil
		}), name)
		admit, end, lat := a.last()
		assert.GreaterOrEqual(t, lat, time.Millisecond, name)
		assert.Equal(t, end-admit, lat, name)
	}
}

// statsOnly is an Observer that hears no calls: it reads Stats alone.
type statsOnly struct{}

func (statsOnly) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	return nil, nil, nil
}

func TestObservedGuardReadsTheEndInstantForTheDurations(t *testing.T) {
	ctx := context.Background()
	a := &endSpy{name: "a", untimed: true}
	g, err := sluice.New(sluice.WithName("g"), sluice.With(a), sluice.WithObserver(statsOnly{}))
	require.NoError(t, err)
	require.NoError(t, g.Do(ctx, func(context.Context) error { time.Sleep(2 * time.Millisecond); return nil }))
	admit, end, lat := a.last()
	assert.GreaterOrEqual(t, end-admit, 2*time.Millisecond, "an observed Guard counts the duration: the end instant is read")
	assert.Equal(t, end-admit, lat)
	s := g.Stats()
	assert.Equal(t, uint64(1), s.Policies[0].Outcomes[sluice.Success])
	h := s.Durations[sluice.Success]
	assert.Equal(t, end-admit, h.Sum, "the Guard's duration is the one its policy heard")
	b, _ := slices.BinarySearch(h.Bounds(), end-admit)
	assert.Equal(t, uint64(1), h.Counts[b], "the duration is in its bucket")

	ev := &events{}
	g, err = sluice.New(sluice.WithName("g"), sluice.With(a), sluice.WithObserver(statsOnly{}), sluice.WithObserver(ev))
	require.NoError(t, err)
	require.NoError(t, g.Do(ctx, func(context.Context) error { time.Sleep(time.Millisecond); return nil }))
	admit, end, lat = a.last()
	assert.GreaterOrEqual(t, end-admit, time.Millisecond, "an observer of calls hears the latency")
	assert.Equal(t, end-admit, lat)
	require.Len(t, ev.got, 1)
	assert.Equal(t, lat, ev.got[0].Latency)
	assert.Equal(t, lat, g.Stats().Durations[sluice.Success].Sum)
}
