package redislimit

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
)

// The batch script of each algorithm decides a run of requests as that
// many calls of the one-limit script do, from a fresh key and from each of
// the stored states: the same admissions and Remaining, Reset and
// RetryAfter within the time the single calls took, and the same state
// left behind.
func TestBatchScriptsDecideAsSingleOnes(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	ctx := t.Context()
	tm, err := c.Time(ctx).Result()
	require.NoError(t, err)
	now := tm.UnixMicro()
	// Fresh keys, with periods long enough that nothing refills or turns
	// during the run.
	cases := []storedState{
		{"gcra/fresh", 'g', 1e10, 10, 1, nil},
		{"token/fresh", 't', 1e10, 10, 1, nil},
		{"fixed/fresh", 'f', 1e11, 10, 1, nil},
		{"sliding/fresh", 's', 1e11, 10, 1, nil},
	}
	cases = append(cases, storedStates(ctx, c, now)...)
	costs := []int64{1, 2, 1, 3, 1, 4, 1, 1, 2, 1, 5, 1}
	admittedAll, rejectedAll := 0, 0
	t.Cleanup(func() {
		if admittedAll == 0 || rejectedAll == 0 {
			t.Errorf("%d admitted, %d rejected: the runs should have both", admittedAll, rejectedAll)
		}
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			one, batch := uniqueName("one"), uniqueName("batch")
			for _, k := range []string{one, batch} {
				if tc.state == nil {
					continue
				}
				require.NoError(t, tc.state(k))
				require.NoError(t, c.PExpire(ctx, k, time.Hour).Err())
			}
			a, b := strconv.FormatInt(tc.a, 10), strconv.FormatInt(tc.b, 10)
			args := []any{a, b}
			for _, n := range costs {
				args = append(args, n)
			}
			// The single calls run after the batch, each a moment later: the
			// instants they decide at differ by as much as that took, at
			// least 10 ms (a loaded machine stretches it).
			began := time.Now()
			within := func() float64 { return float64(max(10*time.Millisecond, time.Since(began))) }
			rb, err := batchScripts[tc.alg].Run(ctx, c, []string{batch}, args...).Text()
			require.NoError(t, err)
			ds, marks := make([]sluice.Decision, len(costs)), make([]int64, len(costs))
			require.NoError(t, parseReply(rb, ds, marks), "batch reply %q", rb)
			admitted := 0
			for i, n := range costs {
				r1, err := singleScripts[tc.alg].Run(ctx, c, []string{one}, a, b, n).Text()
				require.NoError(t, err)
				v1 := replyInts(t, r1)
				d := ds[i]
				if d.Allowed {
					admitted++
				}
				// Remaining may step by one where a weighted window's count
				// crosses a whole unit between the single calls.
				require.Equal(t, v1[0] == 1, d.Allowed, "request %d (cost %d): single %q, batch %+v", i, n, r1, d)
				require.InDelta(t, max(v1[1], 0), d.Remaining, 1, "request %d: single %q, batch %+v", i, r1, d)
				for k, got := range []time.Duration{d.Reset, d.RetryAfter} {
					want := micros(v1[2+k])
					if k == 1 && !d.Allowed {
						want = max(want, time.Microsecond)
					}
					require.InDelta(t, want, got, within(), "request %d: single %q, batch %+v", i, r1, d)
				}
			}
			admittedAll += admitted
			rejectedAll += len(costs) - admitted
			if tc.alg == 'g' {
				tat1, _ := c.Get(ctx, one).Int64()
				tat2, _ := c.Get(ctx, batch).Int64()
				require.InDelta(t, tat1, tat2, within()/float64(time.Microsecond), "stored TAT")
			} else {
				h1, h2 := c.HGetAll(ctx, one).Val(), c.HGetAll(ctx, batch).Val()
				require.Len(t, h2, len(h1))
				for f, v := range h2 {
					n1, _ := strconv.ParseInt(h1[f], 10, 64)
					n2, _ := strconv.ParseInt(v, 10, 64)
					require.InDelta(t, n1, n2, within()/float64(time.Microsecond), "field %s", f)
				}
			}
			ttl := c.PTTL(ctx, batch).Val()
			require.Positive(t, ttl, "the batch left its key without a TTL")
			require.InDelta(t, c.PTTL(ctx, one).Val(), ttl, max(float64(50*time.Millisecond), within()))
		})
	}
}

// gateHook holds a limiter's script calls (EVALSHA) at the start of their
// processing until before returns, and counts them; a call for which fail
// returns an error fails with it, unsent.
type gateHook struct {
	calls  atomic.Int64
	before func(n int64) // the n-th script call, from 1
	fail   func(n int64) error
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			n := h.calls.Add(1)
			if h.before != nil {
				h.before(n)
			}
			if h.fail != nil {
				if err := h.fail(n); err != nil {
					cmd.SetErr(err)
					return err
				}
			}
		}
		return next(ctx, cmd)
	}
}

// hookedClient returns a client of the server at addr with the limiters'
// scripts loaded and a gateHook on its calls.
func hookedClient(t *testing.T, addr string) (*redis.Client, *gateHook) {
	t.Helper()
	c := newClient(t, addr)
	loadScripts(t, c)
	hook := &gateHook{}
	c.AddHook(hook)
	return c, hook
}

// holdFlights holds the first maxFlights script calls through hook, the
// calls a key has in flight before its requests queue, until the returned
// channel is closed.
func holdFlights(hook *gateHook) chan struct{} {
	gate := make(chan struct{})
	hook.before = func(n int64) {
		if n <= maxFlights {
			<-gate
		}
	}
	return gate
}

// loadScripts loads the limiters' scripts into Redis, so that no call
// meets NOSCRIPT and is sent again as EVAL.
func loadScripts(t *testing.T, c *redis.Client) {
	t.Helper()
	for _, m := range []map[byte]*script{singleScripts, batchScripts} {
		for _, sc := range m {
			require.NoError(t, c.ScriptLoad(t.Context(), sc.src).Err())
		}
	}
}

// queued returns how many requests wait in l's lanes, and how many keys
// have calls in flight.
func queued(l *Limiter) (waiting, keys int) {
	for i := range l.lanes {
		sh := &l.lanes[i]
		sh.mu.Lock()
		for _, ln := range sh.m {
			waiting += len(ln.q)
		}
		keys += len(sh.m)
		sh.mu.Unlock()
	}
	return waiting, keys
}

// awaitQueue waits until n requests wait in l's lanes.
func awaitQueue(t *testing.T, l *Limiter, n int) {
	t.Helper()
	for range 2000 {
		if q, _ := queued(l); q >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	q, _ := queued(l)
	t.Fatalf("%d requests queued, want %d", q, n)
}

// With every flight of a key held at Redis's door, the requests that come
// on queue, and go together in one batch call when a flight returns: each
// algorithm then admits exactly its quota, handing out each Remaining from
// quota-1 to 0 once, and every request is decided by Redis.
func TestCoalescedRequestsAreDecidedTogether(t *testing.T) {
	s := newServer(t)
	const quota, requests = 16, 40
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			c, hook := hookedClient(t, s.Addr)
			l, err := alg.make(c, quota, time.Hour, WithName(uniqueName(alg.name)), WithTimeout(20*time.Second))
			require.NoError(t, err)
			gate := holdFlights(hook)
			ctx := sluice.WithKey(context.Background(), "hot")
			ds := make([]sluice.Decision, requests)
			var wg sync.WaitGroup
			for i := range requests {
				wg.Go(func() {
					var tk sluice.Ticket
					ds[i], tk = admitD(l, ctx, monoclock.Now())
					l.Done(tk, sluice.Success, monoclock.Now(), 0)
				})
			}
			awaitQueue(t, l, requests-maxFlights)
			close(gate)
			wg.Wait()

			var remaining []int64
			for _, d := range ds {
				require.Equal(t, l.Name(), d.Policy, "a request was not decided by Redis: %+v", d)
				if d.Allowed {
					remaining = append(remaining, d.Remaining)
				} else {
					require.Positive(t, d.RetryAfter)
				}
			}
			slices.Sort(remaining)
			want := make([]int64, quota)
			for i := range want {
				want[i] = int64(i)
			}
			require.Equal(t, want, remaining, "the Remaining of the admitted requests")
			// maxFlights lone calls, then one batch for all the queued.
			require.Equal(t, int64(maxFlights+1), hook.calls.Load(), "script calls")
			_, keys := queued(l)
			require.Zero(t, keys, "a key still has a call in flight")
		})
	}
}

// A request queued behind calls that do not return waits no longer than
// its timeout, then the failure policy decides it; when the calls return,
// the request that gave up is left out, and the key ends with no call in
// flight.
func TestCoalescedRequestWaitsAtMostItsTimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	s := newServer(t)
	c, hook := hookedClient(t, s.Addr)
	var log eventLog
	l, err := NewGCRA(c, rateOf(time.Second), 10, WithName(uniqueName("queue-timeout")),
		WithTimeout(timeout), WithFailClosed(), WithBreaker(100, time.Second), WithObserver(log.observe))
	require.NoError(t, err)
	gate := make(chan struct{})
	hook.before = func(int64) { <-gate } // the calls in flight hang past their deadline
	ctx := sluice.WithKey(context.Background(), "hot")
	var wg sync.WaitGroup
	for range maxFlights {
		wg.Go(func() { l.Admit(ctx, monoclock.Now()) })
	}
	for hook.calls.Load() < maxFlights {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	d, _ := admitD(l, ctx, monoclock.Now())
	waited := time.Since(start)
	require.Equal(t, l.Name()+":closed", d.Policy)
	require.GreaterOrEqual(t, waited, timeout*15/16)
	require.Less(t, waited, timeout+schedSlack+50*time.Millisecond)
	require.Equal(t, 1, log.count(EventRedisError))
	// A timeout to the observer, as the calls in flight's are: a metrics
	// observer counts both as error.type "timeout", not this one "_OTHER".
	log.mu.Lock()
	for _, e := range log.events {
		if e.Kind == EventRedisError {
			assert.ErrorIs(t, e.Err, context.DeadlineExceeded)
		}
	}
	log.mu.Unlock()
	close(gate)
	wg.Wait()
	q, keys := queued(l)
	require.Zero(t, q)
	require.Zero(t, keys, "a key still has a call in flight")
	require.Equal(t, int64(maxFlights), hook.calls.Load(), "the request that gave up was sent")
}

// A batch's sender that panics in the call (a go-redis hook, here) takes
// its own request down with it; the rest of its batch are decided by their
// failure policy instead of waiting for ever, the breaker around Redis does
// not count the panic as Redis's failure, and the key is free again.
func TestCoalescedSenderPanicFreesItsBatch(t *testing.T) {
	s := newServer(t)
	c, hook := hookedClient(t, s.Addr)
	l, err := NewGCRA(c, rateOf(time.Second), 100, WithName(uniqueName("panic")), WithTimeout(20*time.Second))
	require.NoError(t, err)
	const requests = 12
	gate := make(chan struct{})
	hook.before = func(n int64) {
		if n <= maxFlights {
			<-gate
			return
		}
		panic("hook")
	}
	ctx := sluice.WithKey(context.Background(), "hot")
	var panics atomic.Int64
	ds := make([]sluice.Decision, requests)
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			defer func() {
				if recover() != nil {
					panics.Add(1)
				}
			}()
			ds[i], _ = admitD(l, ctx, monoclock.Now())
		})
	}
	awaitQueue(t, l, requests-maxFlights)
	close(gate)
	wg.Wait()
	require.Equal(t, int64(1), panics.Load())
	open := 0
	for _, d := range ds {
		if d.Policy == l.Name()+":open" {
			open++
		}
	}
	require.Equal(t, requests-maxFlights-1, open, "the rest of the panicking batch go to their failure policy")
	_, keys := queued(l)
	require.Zero(t, keys)
	// The key goes to Redis again.
	hook.before = nil
	d, _ := admitD(l, ctx, monoclock.Now())
	assert.Equal(t, l.Name(), d.Policy)
}

// WithoutCoalescing sends every request on its own, and so does a limiter
// built by All of several limits; All of one limit coalesces as that limit
// alone does, unless told not to.
func TestWithoutCoalescing(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	l, err := NewGCRA(c, rateOf(time.Second), 10, WithName(uniqueName("solo")), WithoutCoalescing())
	require.NoError(t, err)
	assert.Nil(t, l.lanes)
	l2, err := NewGCRA(c, rateOf(time.Second), 10, WithName(uniqueName("solo")))
	require.NoError(t, err)
	assert.NotNil(t, l2.lanes)
	all, err := All([]*Limiter{l, l2})
	require.NoError(t, err)
	assert.Nil(t, all.lanes)
	one, err := All([]*Limiter{l})
	require.NoError(t, err)
	assert.NotNil(t, one.lanes)
	one, err = All([]*Limiter{l2}, WithoutCoalescing())
	require.NoError(t, err)
	assert.Nil(t, one.lanes)
}

// After many keys had calls in flight at once, the lanes kept for reuse
// stay bounded, and no key is left with a lane.
func TestCoalescingKeepsFewLanes(t *testing.T) {
	s := newServer(t)
	c, hook := hookedClient(t, s.Addr)
	l, err := NewGCRA(c, rateOf(time.Second), 10, WithName(uniqueName("lanes")), WithTimeout(20*time.Second))
	require.NoError(t, err)
	const keys = 24 * laneShards // more than maxFreeLanes for every shard
	gate := make(chan struct{})
	hook.before = func(int64) { <-gate }
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			d, _ := admitD(l, sluice.WithKey(context.Background(), "k"+strconv.Itoa(i)), monoclock.Now())
			assert.Equal(t, l.Name(), d.Policy)
		})
	}
	for hook.calls.Load() < keys {
		time.Sleep(time.Millisecond)
	}
	_, inFlight := queued(l)
	require.Equal(t, keys, inFlight)
	close(gate)
	wg.Wait()
	_, inFlight = queued(l)
	require.Zero(t, inFlight)
	kept := 0
	for i := range l.lanes {
		sh := &l.lanes[i]
		sh.mu.Lock()
		n := len(sh.free)
		sh.mu.Unlock()
		require.LessOrEqual(t, n, maxFreeLanes)
		kept += n
	}
	require.Positive(t, kept, "no lane was kept for reuse")
}

// The breaker around Redis counts failed calls: one batch call that fails
// is one failure, however many requests it carried, so a single lost call
// of a hot key does not open the breaker for every key of the limiter.
func TestCoalescedBatchFailureIsOneFailedCall(t *testing.T) {
	s := newServer(t)
	c, hook := hookedClient(t, s.Addr)
	var log eventLog
	l, err := NewGCRA(c, rateOf(time.Second), 100, WithName(uniqueName("batch-fails")),
		WithTimeout(20*time.Second), WithBreaker(defaultBreakerFailures, time.Minute), WithObserver(log.observe))
	require.NoError(t, err)
	gate, flown := make(chan struct{}), make(chan struct{})
	hook.before = func(n int64) {
		switch {
		case n <= maxFlights:
			<-gate
		case n == maxFlights+1:
			<-flown // the batch fails after every lone call has succeeded
		}
	}
	hook.fail = func(n int64) error {
		if n == maxFlights+1 {
			return errors.New("connection reset")
		}
		return nil
	}
	ctx := sluice.WithKey(context.Background(), "hot")
	var flights, queue sync.WaitGroup
	for range maxFlights {
		flights.Go(func() {
			d, _ := admitD(l, ctx, monoclock.Now())
			assert.Equal(t, l.Name(), d.Policy)
		})
	}
	for hook.calls.Load() < maxFlights {
		time.Sleep(time.Millisecond)
	}
	const queued = 2 * defaultBreakerFailures
	for range queued {
		queue.Go(func() {
			d, _ := admitD(l, ctx, monoclock.Now())
			assert.Equal(t, l.Name()+":open", d.Policy)
		})
	}
	awaitQueue(t, l, queued)
	close(gate)
	flights.Wait()
	close(flown)
	queue.Wait()
	require.Equal(t, int64(maxFlights+1), hook.calls.Load(), "script calls")
	require.Equal(t, queued, log.count(EventRedisError), "each request of the batch hears of the failure")
	require.Empty(t, log.transitions(), "one failed call opened the breaker")
	d, _ := admitD(l, ctx, monoclock.Now())
	require.Equal(t, l.Name(), d.Policy, "the next request goes to Redis")
}

// A half-open probe whose call panics (in a go-redis hook) gives its slot
// back: the next request probes Redis, rather than the breaker staying
// half-open, with every request on the failure policy, for ever.
func TestPanickingProbeEndsItsTicket(t *testing.T) {
	s := newServer(t)
	for _, tc := range []struct {
		name string
		opts []Option
	}{{"coalescing", nil}, {"without coalescing", []Option{WithoutCoalescing()}}} {
		t.Run(tc.name, func(t *testing.T) {
			c, hook := hookedClient(t, s.Addr)
			const openFor = 20 * time.Millisecond
			l, err := NewGCRA(c, rateOf(time.Second), 100, append([]Option{WithName(uniqueName("probe-panics")),
				WithTimeout(time.Second), WithBreaker(1, openFor)}, tc.opts...)...)
			require.NoError(t, err)
			hook.fail = func(n int64) error {
				if n == 1 {
					return errors.New("connection reset")
				}
				return nil
			}
			hook.before = func(n int64) {
				if n == 2 {
					panic("hook")
				}
			}
			ctx := sluice.WithKey(context.Background(), "k")
			d, _ := admitD(l, ctx, monoclock.Now())
			require.Equal(t, l.Name()+":open", d.Policy)
			time.Sleep(2 * openFor)
			require.Panics(t, func() { l.Admit(ctx, monoclock.Now()) }, "the probe")
			d, _ = admitD(l, ctx, monoclock.Now())
			require.Equal(t, l.Name(), d.Policy, "the next request probes Redis")
			require.Equal(t, int64(3), hook.calls.Load())
		})
	}
}

// A request that gave up waiting is left out of the batch of a request
// queued before it, even when that one still waits: it was decided by its
// failure policy, and Redis must not charge it too.
func TestCoalescedBatchLeavesOutRequestsThatGaveUp(t *testing.T) {
	s := newServer(t)
	c, hook := hookedClient(t, s.Addr)
	const quota = 100
	l, err := NewGCRA(c, rateOf(time.Hour), quota, WithName(uniqueName("gave-up")), WithTimeout(20*time.Second))
	require.NoError(t, err)
	gate := holdFlights(hook)
	ctx := sluice.WithKey(context.Background(), "hot")
	var wg sync.WaitGroup
	for range maxFlights {
		wg.Go(func() { l.Admit(ctx, monoclock.Now()) })
	}
	for hook.calls.Load() < maxFlights {
		time.Sleep(time.Millisecond)
	}
	var first sluice.Decision
	wg.Go(func() { first, _ = admitD(l, ctx, monoclock.Now()) })
	awaitQueue(t, l, 1)
	// The next request's deadline comes before the first's, as when it took
	// its deadline epoch first and reached the queue second.
	long := l.deadlines
	l.deadlines = newEpochs(20 * time.Millisecond)
	d, _ := admitD(l, ctx, monoclock.Now())
	l.deadlines = long
	require.Equal(t, l.Name()+":open", d.Policy, "the request that gave up")
	close(gate)
	wg.Wait()
	require.Equal(t, l.Name(), first.Policy)
	d, _ = admitD(l, ctx, monoclock.Now())
	require.Equal(t, int64(quota-maxFlights-2), d.Remaining, "Redis charged the request that gave up")
}
