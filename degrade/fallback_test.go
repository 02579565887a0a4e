package degrade_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/internal/timeouterr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errBoom = errors.New("boom")

// rejecter is a policy that rejects every request with its cause.
type rejecter struct {
	name  string
	cause error
}

func (r rejecter) Name() string { return r.name }
func (r rejecter) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1, RetryAfter: time.Second}, r.cause
}
func (rejecter) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (rejecter) Needs() sluice.Needs                                              { return 0 }

// counter is a policy that admits everything and counts the outcomes.
type counter struct {
	mu sync.Mutex
	n  map[sluice.Outcome]int
}

func (*counter) Name() string { return "counter" }
func (*counter) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1}, nil
}
func (*counter) Needs() sluice.Needs { return 0 }
func (c *counter) Done(_ sluice.Ticket, o sluice.Outcome, _, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[sluice.Outcome]int{}
	}
	c.n[o]++
}
func (c *counter) count(o sluice.Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[o]
}

// recorder keeps what a listener or an observer was told, in order.
type recorder[T any] struct {
	mu   sync.Mutex
	list []T
}

func (r *recorder[T]) add(v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, v)
}

func (r *recorder[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]T(nil), r.list...)
}

// events records fallback events.
type events struct{ recorder[sluice.FallbackEvent] }

func (e *events) record(_ context.Context, ev sluice.FallbackEvent) { e.add(ev) }

func newGuard(t testing.TB, opts ...sluice.Option) *sluice.Guard {
	t.Helper()
	g, err := sluice.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// everyCause declares a fallback for each cause, answering with its name.
func everyCause(t testing.TB) *degrade.Fallbacks[string] {
	t.Helper()
	answer := func(s string) degrade.Func[string] {
		return func(context.Context, error) (string, error) { return s, nil }
	}
	fb, err := degrade.New(
		degrade.OnRateLimited(answer("rate-limited")),
		degrade.OnCircuitOpen(answer("circuit-open")),
		degrade.OnOverloaded(answer("overloaded")),
		degrade.OnConcurrencyLimited(answer("concurrency-limited")),
		degrade.OnTimeout(answer("timeout")),
		degrade.OnError(answer("error")),
	)
	require.NoError(t, err)
	return fb
}

func TestEachCauseReachesItsOwnFallback(t *testing.T) {
	tests := []struct {
		name  string
		chain []sluice.Policy
		call  func(context.Context) (string, error)
		want  sluice.Cause
	}{
		{name: "rate-limited", chain: []sluice.Policy{rateLimiter(t)}, want: sluice.CauseRateLimited},
		{name: "circuit-open", chain: []sluice.Policy{openBreaker(t)}, want: sluice.CauseCircuitOpen},
		{name: "overloaded", chain: []sluice.Policy{overloadedGuard(t)}, want: sluice.CauseOverloaded},
		{name: "concurrency-limited", chain: []sluice.Policy{fullBulkhead(t)}, want: sluice.CauseConcurrencyLimited},
		{
			name: "timeout",
			call: func(ctx context.Context) (string, error) {
				<-ctx.Done()
				return "", ctx.Err()
			},
			want: sluice.CauseTimeout,
		},
		{
			name: "error",
			call: func(context.Context) (string, error) { return "", errBoom },
			want: sluice.CauseNone,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := &counter{}
				var evs events
				g := newGuard(t, sluice.With(append([]sluice.Policy{c}, tt.chain...)...), sluice.WithClock(sluice.NewManualClock(time.Second)),
					sluice.WithTimeout(time.Second), sluice.WithFallback(everyCause(t)), sluice.OnFallback(evs.record))
				call := tt.call
				if call == nil {
					call = func(context.Context) (string, error) { return "fresh", nil }
				}
				v, err := sluice.Execute(context.Background(), g, call)
				require.NoError(t, err)
				assert.Equal(t, tt.name, v)
				require.Len(t, evs.all(), 1)
				ev := evs.all()[0]
				assert.Equal(t, tt.name, ev.Fallback)
				assert.Equal(t, tt.want, ev.Cause)
				if tt.chain != nil {
					assert.Equal(t, tt.chain[0].Name(), ev.Policy)
					assert.Equal(t, 1, c.count(sluice.Released))
				} else {
					assert.Equal(t, 1, c.count(sluice.Failure), "the failure is counted before the fallback hides it")
				}
			})
		})
	}
}

func TestMostSpecificRuleWins(t *testing.T) {
	rl := sluice.Rejection(sluice.Decision{Policy: "rl", Limit: -1, Cause: sluice.ErrRateLimited})
	co := sluice.Rejection(sluice.Decision{Policy: "br", Limit: -1, Cause: sluice.ErrCircuitOpen})
	timeout := &timeouterr.Error{After: time.Second, Err: context.DeadlineExceeded}
	name := func(s string) degrade.Func[string] {
		return func(context.Context, error) (string, error) { return s, nil }
	}
	tests := []struct {
		name  string
		rules []degrade.Rule[string]
		err   error
		want  string // "" : not declared
	}{
		{"cause beats rejected and error", []degrade.Rule[string]{degrade.OnError(name("e")), degrade.OnRejected(name("r")), degrade.OnRateLimited(name("rl"))}, rl, "rl"},
		{"rejected beats error", []degrade.Rule[string]{degrade.OnError(name("e")), degrade.OnRejected(name("r")), degrade.OnRateLimited(name("rl"))}, co, "r"},
		{"error catches the rest", []degrade.Rule[string]{degrade.OnError(name("e")), degrade.OnRejected(name("r"))}, errBoom, "e"},
		{"timeout is no rejection", []degrade.Rule[string]{degrade.OnRejected(name("r"))}, timeout, ""},
		{"timeout rule", []degrade.Rule[string]{degrade.OnRejected(name("r")), degrade.OnTimeout(name("t"))}, timeout, "t"},
		{"wrapped rejection", []degrade.Rule[string]{degrade.OnCircuitOpen(name("co"))}, fmt.Errorf("payments: %w", co), "co"},
		{"undeclared", []degrade.Rule[string]{degrade.OnCircuitOpen(name("co"))}, rl, ""},
		{"caller cancelled", []degrade.Rule[string]{degrade.OnError(name("e"))}, context.Canceled, "e"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb, err := degrade.New(tt.rules...)
			require.NoError(t, err)
			v, gotName, out := fb.AnswerValue(context.Background(), tt.err)
			declared, ok := fb.Declared(context.Background(), tt.err)
			if tt.want == "" {
				assert.Empty(t, gotName)
				assert.Same(t, tt.err, out)
				assert.False(t, ok)
				return
			}
			require.NoError(t, out)
			assert.Equal(t, tt.want, v)
			assert.True(t, ok)
			assert.Equal(t, gotName, declared)
		})
	}
}

func TestRuleNames(t *testing.T) {
	v := degrade.Value(1)
	fb, err := degrade.New(degrade.OnRateLimited(v), degrade.OnRejected(v), degrade.OnError(v).Named("default-page"))
	require.NoError(t, err)
	for err, want := range map[error]string{
		sluice.Rejection(sluice.Decision{Cause: sluice.ErrRateLimited}): "rate-limited",
		sluice.Rejection(sluice.Decision{Cause: sluice.ErrOverloaded}):  "rejected",
		errBoom: "default-page",
	} {
		name, ok := fb.Declared(context.Background(), err)
		assert.True(t, ok)
		assert.Equal(t, want, name)
	}
	_, ok := fb.Declared(context.Background(), nil)
	assert.False(t, ok)
}

func TestDecliningFallbackReturnsTheOriginalError(t *testing.T) {
	var evs events
	fb, err := degrade.New(degrade.OnRateLimited(func(_ context.Context, err error) (int, error) {
		return 0, err // declines: nothing better to say
	}))
	require.NoError(t, err)
	g := newGuard(t, sluice.With(rejecter{"rl", sluice.ErrRateLimited}), sluice.WithFallback(fb), sluice.OnFallback(evs.record))

	_, err = sluice.Execute(context.Background(), g, func(context.Context) (int, error) { return 1, nil })
	d, ok := sluice.RejectionOf(err)
	require.True(t, ok)
	assert.Equal(t, "rl", d.Policy)
	assert.ErrorIs(t, g.Do(context.Background(), func(context.Context) error { return nil }), sluice.ErrRateLimited)
	assert.Empty(t, evs.all())

	v, name, err := fb.AnswerValue(context.Background(), errBoom)
	assert.Same(t, errBoom, err, "an undeclared error goes through")
	assert.Empty(t, name)
	assert.Zero(t, v)
}

func TestFallbackPanicPropagates(t *testing.T) {
	fb, err := degrade.New(degrade.OnError(func(context.Context, error) (int, error) { panic("no fallback today") }))
	require.NoError(t, err)
	c := &counter{}
	g := newGuard(t, sluice.With(c), sluice.WithFallback(fb))
	assert.PanicsWithValue(t, "no fallback today", func() {
		_, _ = sluice.Execute(context.Background(), g, func(context.Context) (int, error) { return 0, errBoom })
	})
	assert.Equal(t, 1, c.count(sluice.Failure))
}

func TestDoAppliesFallbacks(t *testing.T) {
	fb, err := degrade.New(degrade.OnCircuitOpen(degrade.Value(struct{}{})))
	require.NoError(t, err)
	g := newGuard(t, sluice.With(openBreaker(t)), sluice.WithFallback(fb))
	ran := false
	require.NoError(t, g.Do(context.Background(), func(context.Context) error { ran = true; return nil }))
	assert.False(t, ran)
}

func TestNewValidates(t *testing.T) {
	v := degrade.Value("x")
	tests := []struct {
		name  string
		rules []degrade.Rule[string]
		want  string
	}{
		{"no rule", nil, "no rule"},
		{"zero rule", []degrade.Rule[string]{{}}, "not made by an On function"},
		{"nil function", []degrade.Rule[string]{degrade.OnTimeout[string](nil)}, "nil function"},
		{"twice", []degrade.Rule[string]{degrade.OnTimeout(v), degrade.OnError(v), degrade.OnTimeout(v).Named("t2")}, "same errors"},
		{"empty name", []degrade.Rule[string]{degrade.OnError(v).Named("")}, "empty name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb, err := degrade.New(tt.rules...)
			assert.Nil(t, fb)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// A call that runs past the outer Guard's deadline while it waits in an
// inner Guard's queue gets the timeout's fallback, not the rejection's: the
// outer Guard timed out, whatever the inner one answered.
func TestTimeoutWhileQueuedInAnInnerGuardIsATimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bh, err := adaptive.NewBulkhead(1, adaptive.WithQueue(10, 0))
		require.NoError(t, err)
		inner, err := sluice.New(sluice.With(bh))
		require.NoError(t, err)
		hold := make(chan struct{})
		go func() { _ = inner.Do(context.Background(), func(context.Context) error { <-hold; return nil }) }()
		synctest.Wait()
		var events []sluice.FallbackEvent
		fb, err := degrade.New(degrade.OnTimeout(degrade.Value("timeout")), degrade.OnRejected(degrade.Value("rejected")))
		require.NoError(t, err)
		outer, err := sluice.New(sluice.WithTimeout(100*time.Millisecond), sluice.WithFallback(fb),
			sluice.OnFallback(func(_ context.Context, e sluice.FallbackEvent) { events = append(events, e) }))
		require.NoError(t, err)
		v, err := sluice.Execute(context.Background(), outer, func(ctx context.Context) (string, error) {
			return sluice.Execute(ctx, inner, func(context.Context) (string, error) { return "ok", nil })
		})
		close(hold)
		require.NoError(t, err)
		assert.Equal(t, "timeout", v)
		if assert.Len(t, events, 1) {
			assert.Equal(t, sluice.CauseTimeout, events[0].Cause)
			assert.Empty(t, events[0].Policy, "no policy of the outer Guard rejected")
		}
		te := &timeouterr.Error{After: time.Second, Err: sluice.Rejection(
			sluice.Decision{Policy: "bulkhead", Cause: sluice.ErrConcurrencyLimited})}
		name, _ := fb.Declared(context.Background(), te)
		assert.Equal(t, "timeout", name)
		assert.Equal(t, sluice.CauseTimeout, sluice.CauseOf(te))
	})
}
