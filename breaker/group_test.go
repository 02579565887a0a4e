package breaker_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/policytest"
)

func mustGroup(t *testing.T, opts ...breaker.Option) *breaker.Group {
	t.Helper()
	g, err := breaker.NewGroup("deps", opts...)
	require.NoError(t, err)
	return g
}

func res(r string) context.Context { return sluice.WithResource(context.Background(), r) }

func fail(t *testing.T, g *breaker.Group, ctx context.Context, now time.Duration) {
	t.Helper()
	d, tk := admit(g, ctx, now)
	require.True(t, d.Allowed)
	g.Done(tk, F, now, 0)
}

func TestGroupOneBreakerPerResource(t *testing.T) {
	var mu sync.Mutex
	var changes []sluice.StateChange
	g := mustGroup(t, breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(sec))
	g.Subscribe(func(c sluice.StateChange) {
		mu.Lock()
		changes = append(changes, c)
		mu.Unlock()
	})
	fail(t, g, res("payments"), 0)
	fail(t, g, res("search"), 0)
	fail(t, g, res("payments"), 0)
	d, _ := admit(g, res("payments"), ms)
	assert.False(t, d.Allowed)
	assert.Equal(t, "breaker/deps", d.Policy)
	assert.Equal(t, sec-ms, d.RetryAfter)
	d, tk := admit(g, res("search"), ms)
	assert.True(t, d.Allowed, "search is another breaker")
	g.Done(tk, S, ms, 0)
	assert.Equal(t, 2, g.Len())
	pb, ok := g.Get("payments")
	require.True(t, ok)
	assert.Equal(t, breaker.StateOpen, pb.State())
	assert.Equal(t, "breaker/deps/payments", pb.Name())
	_, ok = g.Get("nope")
	assert.False(t, ok)
	require.Len(t, changes, 1)
	assert.Equal(t, sluice.StateChange{Policy: "breaker/deps/payments", From: "closed", To: "open", At: 0}, changes[0])
}

func TestGroupKeyFunc(t *testing.T) {
	g := mustGroup(t, breaker.WithConsecutiveFailures(1),
		breaker.WithKeyFunc(func(ctx context.Context) string { k, _ := sluice.KeyFrom(ctx); return "host:" + k }))
	fail(t, g, sluice.WithKey(context.Background(), "a"), 0)
	b, ok := g.Get("host:a")
	require.True(t, ok)
	assert.Equal(t, breaker.StateOpen, b.State())
}

func TestGroupEvictsLeastRecentlyUsedClosedBreaker(t *testing.T) {
	g := mustGroup(t, breaker.WithMaxBreakers(3), breaker.WithConsecutiveFailures(1))
	ctx := context.Background()
	use := func(key string, now time.Duration) {
		d, tk := admit(g, res(key), now)
		require.True(t, d.Allowed, key)
		g.Done(tk, S, now, 0)
	}
	use("a", 0)
	use("b", 10*ms)
	fail(t, g, res("c"), 20*ms) // c opens: never evicted while open
	use("a", 30*ms)
	use("d", 40*ms) // full: b is the closed one used least recently
	_, ok := g.Get("b")
	assert.False(t, ok, "b evicted")
	for _, k := range []string{"a", "c", "d"} {
		_, ok := g.Get(k)
		assert.True(t, ok, k)
	}
	assert.Equal(t, 3, g.Len())
	_ = ctx
}

func TestGroupOverflowWhenEveryBreakerIsOpen(t *testing.T) {
	g := mustGroup(t, breaker.WithMaxBreakers(2), breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec))
	fail(t, g, res("a"), 0)
	fail(t, g, res("b"), 0)
	d, tk := admit(g, res("c"), ms)
	require.True(t, d.Allowed, "c goes to the overflow breaker")
	g.Done(tk, S, ms, 0)
	_, ok := g.Get("c")
	assert.False(t, ok)
	assert.Equal(t, 2, g.Len())
	// a and b stay open and remembered.
	d, _ = admit(g, res("a"), ms)
	assert.False(t, d.Allowed)
}

func TestGroupTicketOfAnEvictedBreakerIsDropped(t *testing.T) {
	g := mustGroup(t, breaker.WithMaxBreakers(1), breaker.WithConsecutiveFailures(1))
	d, old := admit(g, res("a"), 0)
	require.True(t, d.Allowed)
	d, tk := admit(g, res("b"), ms) // evicts a; b takes its slot
	require.True(t, d.Allowed)
	g.Done(old, F, ms, 0) // a's late failure must not reach b
	b, ok := g.Get("b")
	require.True(t, ok)
	assert.Equal(t, breaker.StateClosed, b.State())
	g.Done(tk, S, ms, 0)
	assert.Equal(t, int64(1), b.Counts().Requests)
}

func TestGroupConcurrentKeys(t *testing.T) {
	g := mustGroup(t, breaker.WithMaxBreakers(16), breaker.WithErrorRatio(0.5, 10))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				ctx := res(fmt.Sprint((i * (w + 1)) % 40))
				now := time.Duration(i) * ms
				d, tk := admit(g, ctx, now)
				if d.Allowed {
					g.Done(tk, []sluice.Outcome{S, S, F}[i%3], now, ms)
				}
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, g.Len(), 16)
}

func TestGroupOptionsValidation(t *testing.T) {
	for name, opts := range map[string][]breaker.Option{
		"max 0":           {breaker.WithMaxBreakers(0)},
		"nil key func":    {breaker.WithKeyFunc(nil)},
		"adaptive option": {breaker.WithMultiplier(3)},
		"bad jitter":      {breaker.WithJitter(1)},
		"bad member":      {breaker.WithErrorRatio(2, 1)},
	} {
		_, err := breaker.NewGroup("g", opts...)
		assert.Error(t, err, name)
	}
	_, err := breaker.NewGroup("")
	assert.Error(t, err)
}

func TestGroupHotPathDoesNotAllocate(t *testing.T) {
	g := mustGroup(t)
	ctx := res("payments")
	d, tk := admit(g, ctx, 0) // made on first use
	require.True(t, d.Allowed)
	g.Done(tk, S, 0, 0)
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		d, tk := admit(g, ctx, ms)
		if d.Allowed {
			g.Done(tk, S, ms, ms)
		}
	}))
}

func TestGroupAdmitInAGuard(t *testing.T) {
	g := mustGroup(t)
	ctx := res("payments")
	v := policytest.AnswerOf(g.Admit(ctx, 0)) // made on first use
	require.NoError(t, v.Cause)
	assert.Equal(t, int64(-1), v.Limit)
	g.Done(v.Ticket, S, 0, 0)
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		v := policytest.AnswerOf(g.Admit(ctx, ms))
		if v.Cause == nil {
			g.Done(v.Ticket, S, ms, ms)
		}
	}))

	// In a Guard, a rejection names the Group; the member's own, through
	// its Allow, names the member.
	guard, err := sluice.New(sluice.With(g))
	require.NoError(t, err)
	b, ok := g.Get("payments")
	require.True(t, ok)
	b.ForceOpen()
	err = guard.Do(ctx, func(context.Context) error { t.Fatal("ran while open"); return nil })
	d := rejection(t, err)
	assert.Equal(t, g.Name(), d.Policy)
	assert.ErrorIs(t, err, sluice.ErrCircuitOpen)
	_, own := b.Allow()
	assert.Equal(t, b.Name(), rejection(t, own).Policy)
	assert.Equal(t, g.Name(), rejection(t, err).Policy, "the member's rejection left the Group's")
	var call sluice.Call
	err = guard.Begin(ctx, &call)
	sameRejection(t, call.Decision(), err)
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		_ = guard.Do(ctx, func(context.Context) error { return nil })
	}), "an open member's rejections")
}

// The Group's listeners hear one change at a time even when two members trip together on two goroutines.
func TestGroupListenersHearOneChangeAtATime(t *testing.T) {
	var in, overlaps atomic.Int32
	heard := 0 // no lock: one change at a time
	listen := func() {
		if in.Add(1) > 1 {
			overlaps.Add(1)
		}
		// Stay a while, so that a second delivery would overlap.
		for end := time.Now().Add(50 * time.Millisecond); overlaps.Load() == 0 && time.Now().Before(end); {
			runtime.Gosched()
		}
		heard++
		in.Add(-1)
	}
	g := mustGroup(t, breaker.WithConsecutiveFailures(1))
	g.Subscribe(func(sluice.StateChange) { listen() })
	g.Subscribe(func(sluice.StateChange) { listen() })
	var wg sync.WaitGroup
	for _, key := range []string{"a", "b"} {
		wg.Go(func() {
			d, tk := admit(g, res(key), monoclock.Now())
			if assert.True(t, d.Allowed) {
				g.Done(tk, sluice.Failure, monoclock.Now(), 0)
			}
		})
	}
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "a listener called for two changes at once")
	assert.Equal(t, 4, heard, "two listeners, two changes")
}

// slowListener subscribes to g a listener that records each change it hears
// and holds up the first delivery: trip runs on its own goroutine and makes
// the first change; the test then goes on while that delivery waits, and
// heard, called once the test is done, lets it finish and returns what the
// listener heard.
func slowListener(t *testing.T, g *breaker.Group, trip func()) (heard func() []string) {
	t.Helper()
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var got []string
	first := true
	g.Subscribe(func(c sluice.StateChange) {
		mu.Lock()
		got = append(got, c.Policy+" "+c.From+"->"+c.To+" @"+c.At.String())
		block := first
		first = false
		mu.Unlock()
		if block {
			close(entered)
			<-release
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		trip()
	}()
	<-entered
	return func() []string {
		close(release)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

// tripOffTest fails one call of ctx at 0 on a goroutine other than the
// test's, where require must not be used.
func tripOffTest(t *testing.T, g *breaker.Group, ctx context.Context) {
	d, tk := admit(g, ctx, 0)
	if assert.True(t, d.Allowed) {
		g.Done(tk, F, 0, 0)
	}
}

// A member evicted while its changes still wait to be delivered (a slow
// listener busy with an earlier one): the Group's listeners hear them all.
func TestGroupEvictionKeepsQueuedChanges(t *testing.T) {
	g := mustGroup(t, breaker.WithMaxBreakers(1), breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec))
	heard := slowListener(t, g, func() { tripOffTest(t, g, res("a")) })
	// Meanwhile a recovers: open->half-open, then its probe closes it.
	d, tk := admit(g, res("a"), 2*sec)
	require.True(t, d.Allowed, "probe")
	g.Done(tk, S, 2*sec, 0)
	a, ok := g.Get("a")
	require.True(t, ok)
	require.Equal(t, breaker.StateClosed, a.State())
	// A new key arrives at the full Group: a, closed, is evicted.
	d, tk = admit(g, res("b"), 3*sec)
	require.True(t, d.Allowed)
	g.Done(tk, S, 3*sec, 0)
	assert.Equal(t, []string{
		"breaker/deps/a closed->open @0s",
		"breaker/deps/a open->half-open @2s",
		"breaker/deps/a half-open->closed @2s",
	}, heard(), "the Group's listeners hear every change of a while it was a member")
}

// The Group's listeners hear the changes of its members in the order they
// happened, even when a slow listener holds the delivery up.
func TestGroupListenersHearMembersInOrder(t *testing.T) {
	g := mustGroup(t, breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(sec))
	heard := slowListener(t, g, func() { tripOffTest(t, g, res("a")) })
	d, _ := admit(g, res("a"), 2*sec) // a: open->half-open, at 2s
	require.True(t, d.Allowed)
	fail(t, g, res("b"), 3*sec) // then b: closed->open, at 3s
	assert.Equal(t, []string{
		"breaker/deps/a closed->open @0s",
		"breaker/deps/a open->half-open @2s",
		"breaker/deps/b closed->open @3s",
	}, heard())
}

// A breaker dropped from its Group ignores the outcomes that still reach
// it (a call admitted before the drop): it never opens after the Group
// forgot it, so no open breaker is ever dropped.
func TestDroppedBreakerDoesNotTrip(t *testing.T) {
	g := mustGroup(t, breaker.WithMaxBreakers(1), breaker.WithConsecutiveFailures(1), breaker.WithOpenDuration(time.Hour))
	_, _ = admit(g, res("a"), 0)
	a, ok := g.Get("a")
	require.True(t, ok)
	d, tk := admit(a, context.Background(), 0)
	require.True(t, d.Allowed)
	_, _ = admit(g, res("b"), time.Second) // drops a, closed
	_, ok = g.Get("a")
	require.False(t, ok)
	a.Done(tk, sluice.Failure, time.Second, 0)
	assert.Equal(t, breaker.StateClosed, a.State(), "a dropped breaker does not open")
}

// OpenFor holds open the breaker of the request's key alone.
func TestGroupOpenForHoldsOneKey(t *testing.T) {
	g := mustGroup(t)
	a, b := res("a"), res("b")
	g.OpenFor(a, 0, 30*sec)
	d, _ := admit(g, a, 10*sec)
	assert.False(t, d.Allowed)
	assert.Equal(t, 20*sec, d.RetryAfter)
	d, tk := admit(g, b, 10*sec)
	assert.True(t, d.Allowed, "another key's breaker is not held")
	g.Done(tk, sluice.Success, 10*sec, 0)
	g.OpenFor(b, 10*sec, 0)
	d, _ = admit(g, b, 10*sec)
	assert.True(t, d.Allowed, "no delay, no hold")
}

// At a full Group whose breakers cannot be dropped, a key's Retry-After does
// not hold open the overflow breaker that the keys without a breaker of
// their own share: the others never asked to wait.
func TestGroupOpenForLeavesTheOverflowBreaker(t *testing.T) {
	g := mustGroup(t, breaker.WithMaxBreakers(1), breaker.WithConsecutiveFailures(1))
	fail(t, g, res("a"), 0) // a is open: it is kept
	g.OpenFor(res("b"), sec, 30*sec)
	d, tk := admit(g, res("c"), 2*sec)
	assert.True(t, d.Allowed, "c shares the overflow breaker with b, and asked for no wait")
	g.Done(tk, sluice.Success, 2*sec, 0)
	_, ok := g.Get("b")
	assert.False(t, ok)
}
