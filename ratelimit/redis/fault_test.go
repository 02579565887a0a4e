package redislimit

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/redistest"
	"github.com/sluice-go/sluice/ratelimit"
)

// eventLog records a limiter's events.
type eventLog struct {
	mu     sync.Mutex
	events []Event
}

func (e *eventLog) observe(ev Event) {
	e.mu.Lock()
	e.events = append(e.events, ev)
	e.mu.Unlock()
}

func (e *eventLog) count(kind EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.events {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

func (e *eventLog) transitions() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.events {
		if ev.Kind == EventStateChange {
			out = append(out, ev.From+">"+ev.To)
		}
	}
	return out
}

type fault struct {
	name          string
	inject, clear func(t *testing.T, s *redistest.Server)
}

var faults = []fault{
	{"killed",
		func(t *testing.T, s *redistest.Server) { s.Stop() },
		func(t *testing.T, s *redistest.Server) { s.Restart(t) }},
	{"paused",
		func(t *testing.T, s *redistest.Server) { require.NoError(t, s.Pause()) },
		func(t *testing.T, s *redistest.Server) { require.NoError(t, s.Resume()) }},
}

// TestFailurePolicies takes Redis away (killed, then paused) under each
// failure policy and checks what the policy promises, the latency of the
// decisions during the outage, and that Redis decides again within one
// half-open interval of its return.
func TestFailurePolicies(t *testing.T) {
	const (
		timeout   = 50 * time.Millisecond
		openFor   = 250 * time.Millisecond
		threshold = 3
		burst     = 10
		instances = 2
	)
	policies := []struct {
		name   string
		opt    Option
		suffix string
		check  func(t *testing.T, ds []sluice.Decision)
	}{
		{"open", WithFailOpen(), ":open", func(t *testing.T, ds []sluice.Decision) {
			for _, d := range ds {
				require.True(t, d.Allowed, "%+v", d)
				require.EqualValues(t, -1, d.Limit)
			}
		}},
		{"closed", WithFailClosed(), ":closed", func(t *testing.T, ds []sluice.Decision) {
			for _, d := range ds {
				require.False(t, d.Allowed, "%+v", d)
				require.ErrorIs(t, d.Cause, ErrUnavailable)
				require.ErrorIs(t, d.Cause, sluice.ErrCircuitOpen)
				require.Positive(t, d.RetryAfter)
			}
		}},
		{"local", WithLocalFallback(instances), ":local", func(t *testing.T, ds []sluice.Decision) {
			admitted := 0
			for _, d := range ds {
				if d.Allowed {
					admitted++
				} else {
					require.ErrorIs(t, d.Cause, sluice.ErrRateLimited)
				}
				require.EqualValues(t, burst/instances, d.Limit)
			}
			// This instance's share of the burst, and not one more.
			require.Equal(t, burst/instances, admitted)
		}},
	}
	for _, fp := range policies {
		for _, f := range faults {
			t.Run(fp.name+"/"+f.name, func(t *testing.T) {
				s := newServer(t)
				c := newClient(t, s.Addr)
				var log eventLog
				l, err := NewGCRA(c, ratelimit.Rate{Count: burst, Period: time.Hour}, burst, fp.opt, WithName(uniqueName("fault")),
					WithTimeout(timeout), WithBreaker(threshold, openFor), WithObserver(log.observe))
				require.NoError(t, err)
				var changes []sluice.StateChange
				var chMu sync.Mutex
				unsub := l.Subscribe(func(ch sluice.StateChange) { chMu.Lock(); changes = append(changes, ch); chMu.Unlock() })
				defer unsub()
				ctx := sluice.WithKey(context.Background(), "frank")

				d, tk := admitD(l, ctx, monoclock.Now())
				require.True(t, d.Allowed)
				require.Equal(t, l.Name(), d.Policy)
				l.Done(tk, sluice.Success, monoclock.Now(), 0)

				f.inject(t, s)
				var ds []sluice.Decision
				var lat []time.Duration
				for range 400 {
					start := time.Now()
					d, tk := admitD(l, ctx, monoclock.Now())
					lat = append(lat, time.Since(start))
					require.Equal(t, l.Name()+fp.suffix, d.Policy)
					if d.Allowed {
						l.Done(tk, sluice.Success, monoclock.Now(), 0)
					}
					ds = append(ds, d)
				}
				fp.check(t, ds)
				slices.Sort(lat)
				p99 := lat[len(lat)*99/100]
				assert.LessOrEqual(t, p99, timeout+schedSlack, "p99 latency during the outage")
				t.Logf("during the outage: p99 %v, slowest %v", p99, lat[len(lat)-1])
				assert.Equal(t, len(ds), log.count(EventFallback))
				assert.GreaterOrEqual(t, log.count(EventRedisError), threshold)
				assert.Contains(t, log.transitions(), "closed>open")

				f.clear(t, s)
				back := time.Now()
				for {
					d, tk := admitD(l, ctx, monoclock.Now())
					if d.Allowed {
						l.Done(tk, sluice.Success, monoclock.Now(), 0)
					}
					if d.Policy == l.Name() {
						break
					}
					require.Less(t, time.Since(back), openFor+timeout+500*time.Millisecond,
						"Redis has not decided again within one half-open interval of its return")
					time.Sleep(5 * time.Millisecond)
				}
				assert.Equal(t, "half-open>closed", log.transitions()[len(log.transitions())-1])
				chMu.Lock()
				assert.Equal(t, "closed", changes[len(changes)-1].To)
				chMu.Unlock()
			})
		}
	}
}

// TestScriptFlushMidRun flushes the script cache while decisions run: the
// next call answers NOSCRIPT and is sent again with EVAL, so Redis keeps
// deciding and the failure policy never does.
func TestScriptFlushMidRun(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	var log eventLog
	// A timeout far above any call's, so that only the flush could make a
	// decision miss Redis, however loaded the machine.
	l, err := NewGCRA(c, ratelimit.PerSecond(100000), 100000, WithName(uniqueName("flush")),
		WithFailClosed(), WithObserver(log.observe), WithTimeout(5*time.Second))
	require.NoError(t, err)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				d, tk := admitD(l, context.Background(), monoclock.Now())
				if d.Policy != l.Name() || !d.Allowed {
					errs <- errors.New("a decision not made by Redis: " + d.Policy)
					return
				}
				l.Done(tk, sluice.Success, monoclock.Now(), 0)
			}
		})
	}
	for range 5 {
		time.Sleep(20 * time.Millisecond)
		_, err := s.Do("SCRIPT", "FLUSH")
		require.NoError(t, err)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	assert.Zero(t, log.count(EventRedisError))
}

// TestCallerCancellationIsNotAnOutage pins that a request whose context is
// already cancelled is still decided by Redis and does not count against
// Redis's health.
func TestCallerCancellationIsNotAnOutage(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	l, err := NewGCRA(c, ratelimit.PerSecond(10), 10, WithName(uniqueName("cancel")), WithBreaker(1, time.Hour))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		d, tk := admitD(l, ctx, 0)
		require.Equal(t, l.Name(), d.Policy)
		l.Done(tk, sluice.Success, 0, 0)
	}
}

// schedSlack is what a loaded machine may add to a call bounded by the
// timeout before its goroutine runs again: the decisions in flight when Redis
// goes away end at the timeout, and their callers see it a little later.
const schedSlack = 25 * time.Millisecond

// TestOutageUnderConcurrency pauses Redis under 8 concurrent callers: the
// p99 of their decisions stays within the timeout, and Redis decides again
// after it resumes.
func TestOutageUnderConcurrency(t *testing.T) {
	const timeout, openFor = 50 * time.Millisecond, 200 * time.Millisecond
	s := newServer(t)
	c := newClient(t, s.Addr)
	var log eventLog
	l, err := NewGCRA(c, ratelimit.PerSecond(1_000_000), 1_000_000, WithName(uniqueName("busy")),
		WithTimeout(timeout), WithBreaker(3, openFor), WithObserver(log.observe))
	require.NoError(t, err)
	run := func(d time.Duration) (lat []time.Duration, byRedis int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for range 8 {
			wg.Go(func() {
				var mine []time.Duration
				redis := 0
				for time.Now().Before(end) {
					start := time.Now()
					d, tk := admitD(l, context.Background(), monoclock.Now())
					mine = append(mine, time.Since(start))
					if d.Policy == l.Name() {
						redis++
					}
					if d.Allowed {
						l.Done(tk, sluice.Success, monoclock.Now(), 0)
					}
				}
				mu.Lock()
				lat = append(lat, mine...)
				byRedis += redis
				mu.Unlock()
			})
		}
		wg.Wait()
		return lat, byRedis
	}
	_, byRedis := run(50 * time.Millisecond)
	require.Positive(t, byRedis)

	require.NoError(t, s.Pause())
	lat, _ := run(300 * time.Millisecond)
	require.NoError(t, s.Resume())
	resumed := monoclock.Now()
	slices.Sort(lat)
	assert.LessOrEqual(t, lat[len(lat)*99/100], timeout+schedSlack, "p99 of %d decisions during the outage", len(lat))
	t.Logf("%d decisions during the outage: p99 %v, slowest %v", len(lat), lat[len(lat)*99/100], lat[len(lat)-5:])

	_, byRedis = run(openFor + timeout + 200*time.Millisecond)
	if !assert.Positive(t, byRedis, "Redis did not decide again after it resumed") {
		log.mu.Lock()
		for _, e := range log.events {
			if e.Kind != EventFallback {
				t.Logf("%v %v %s>%s %v", e.At-resumed, e.Kind, e.From, e.To, e.Err)
			}
		}
		log.mu.Unlock()
	}
}

// TestLocalFallbackDecidesAtTheGuardsInstant: while Redis cannot answer,
// the local share decides at the instant the Guard admitted the request at,
// as the same local limiter in the Guard's chain would, and not at that
// instant moved on by the time the failed call to Redis took. Before, the
// requests that reached Redis were decided later than the Guard's clock
// said, so a Retry-After computed on that clock came out longer than the
// interval (3601 s for one token an hour).
func TestLocalFallbackDecidesAtTheGuardsInstant(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens: every call fails at once
	c := newClient(t, addr)
	l, err := NewTokenBucket(c, ratelimit.Rate{Count: 1, Period: time.Hour}, 2, WithLocalFallback(1), WithName(uniqueName("local-instant")),
		WithBreaker(10, time.Minute))
	require.NoError(t, err)
	want, err := ratelimit.NewTokenBucket(ratelimit.Rate{Count: 1, Period: time.Hour}, 2)
	require.NoError(t, err)
	ctx := sluice.WithKey(context.Background(), "k")
	const now = 5 * time.Hour // the Guard's clock; it does not move
	for i := range 3 {
		d, tk := admitD(l, ctx, now)
		wd, wtk := admitD(want, ctx, now)
		require.Equal(t, wd.Allowed, d.Allowed, "request %d", i)
		require.Equal(t, wd.RetryAfter, d.RetryAfter, "request %d: %+v", i, d)
		require.Equal(t, wd.Reset, d.Reset, "request %d: %+v", i, d)
		if d.Allowed {
			l.Done(tk, sluice.Success, now, 0)
			want.Done(wtk, sluice.Success, now, 0)
		}
	}
}

// A Ring, as the other clients, is refused with ContextTimeoutEnabled off:
// the limiter's deadline would not reach its connections, and a decision
// against a Redis that stalls would take the client's seconds.
func TestARingWithoutContextTimeoutIsRefused(t *testing.T) {
	s := newServer(t)
	for _, enabled := range []bool{false, true} {
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": s.Addr}, ContextTimeoutEnabled: enabled})
		_, err := NewGCRA(ring, ratelimit.Rate{Count: 100, Period: time.Second}, 100, WithName(uniqueName("ring")))
		if enabled {
			assert.NoError(t, err)
		} else {
			assert.ErrorContains(t, err, "ContextTimeoutEnabled is off")
		}
		require.NoError(t, ring.Close())
	}
}

// While Redis is unreachable, WithLocalFallback(n) decides with a local
// limiter holding 1/n of the burst. A request whose cost fits the limit
// but not the local share is rate limited until Redis answers again, with
// a RetryAfter: not "never satisfiable", which it is not.
func TestLocalShareDoesNotCallAFittingCostNeverSatisfiable(t *testing.T) {
	c := newClient(t, redistest.DeadAddr(t))
	l, err := NewGCRA(c, ratelimit.Rate{Count: 10, Period: time.Hour}, 10, WithLocalFallback(4),
		WithName(uniqueName("share-never")), WithBreaker(100, time.Minute))
	require.NoError(t, err)
	ctx := sluice.WithCost(sluice.WithKey(context.Background(), "k"), 3) // 3 ≤ burst 10; the share holds 2
	d, _ := admitD(l, ctx, time.Hour)
	require.False(t, d.Allowed)
	assert.NotErrorIs(t, d.Cause, ratelimit.ErrNeverSatisfiable,
		"a cost within the limit is called never satisfiable because Redis is down: %+v", d)
	assert.Positive(t, d.RetryAfter, "a rejection of a satisfiable request must say when to retry: %+v", d)
}
