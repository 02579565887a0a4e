package redislimit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/redistest"
	"github.com/sluice-go/sluice/ratelimit"
)

// The failover tests kill the master of the hot key under load and check
// that the limiters come back to Redis on their own, with the client's
// default options but ContextTimeoutEnabled.

const (
	failoverTimeout = 100 * time.Millisecond // each limiter's WithTimeout
	// failoverSlack is what the race detector and two shared cores may add to
	// a decision's time beyond the limiter's timeout.
	failoverSlack = 100 * time.Millisecond
	// backWithin is how soon after the replica's promotion every limiter
	// must decide by Redis again.
	backWithin = 3 * time.Second
)

func TestClusterFailover(t *testing.T) {
	cl := redistest.StartReplicatedCluster(t, 3, time.Second)
	leaks := goleak.IgnoreCurrent()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	ls := failoverLimiters(t, c)
	k, _ := ls[0].limits[0].key(sluice.WithKey(t.Context(), failoverKey))
	i := cl.MasterOf(cl.KeySlot(t, k))
	runFailover(t, ls, cl.Servers[i], cl.Replicas[i])
	require.NoError(t, c.Close())
	verifyNoLeaks(t, leaks)
}

func TestSentinelFailover(t *testing.T) {
	st := redistest.StartSentinel(t, time.Second)
	leaks := goleak.IgnoreCurrent()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.MasterName, SentinelAddrs: st.SentinelAddrs(),
		ContextTimeoutEnabled: true})
	ls := failoverLimiters(t, c)
	runFailover(t, ls, st.Master, st.Replica)
	require.NoError(t, c.Close())
	verifyNoLeaks(t, leaks)
}

const failoverKey = "hot"

// verifyNoLeaks fails t when a goroutine started since leaks was taken is
// still running a few seconds after the client closed: go-redis's pool
// probes a dead node's address once a second, and its prober ends at its
// next wake.
func verifyNoLeaks(t *testing.T, leaks goleak.Option) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if goleak.Find(leaks) == nil {
			return
		}
	}
	goleak.VerifyNone(t, leaks)
}

// closedRate and closedBurst are the fail-closed limiter's.
var closedRate = ratelimit.Rate{Count: 50, Period: time.Second}

const closedBurst = 20

// failoverLimiters returns a fail-open GCRA, a fail-closed GCRA and All of a
// GCRA and a bucketed sliding window, all on c.
func failoverLimiters(t *testing.T, c redis.UniversalClient) []*Limiter {
	t.Helper()
	open, err := NewGCRA(c, ratelimit.PerSecond(100000), 1000, WithName(uniqueName("open")), WithTimeout(failoverTimeout))
	require.NoError(t, err)
	closed, err := NewGCRA(c, closedRate, closedBurst, WithName(uniqueName("closed")), WithFailClosed(), WithTimeout(failoverTimeout))
	require.NoError(t, err)
	user, err := NewGCRA(c, ratelimit.PerSecond(100000), 1000, WithName(uniqueName("user")))
	require.NoError(t, err)
	route, err := NewSlidingWindow(c, 1<<20, time.Minute, 6, WithName(uniqueName("route")))
	require.NoError(t, err)
	all, err := All([]*Limiter{user, route}, WithName(uniqueName("all")), WithTimeout(failoverTimeout))
	require.NoError(t, err)
	return []*Limiter{open, closed, all}
}

// failoverRecord is one decision of the load.
type failoverRecord struct {
	at, took time.Duration // since the run's start
	limiter  int           // its index in the limiters driven
	policy   string
	allowed  bool
}

// runFailover drives ls from 16 goroutines on the key failoverKey, kills
// master, waits for replica to be promoted and for every limiter to decide by
// Redis again, and checks the decisions made meanwhile.
func runFailover(t *testing.T, ls []*Limiter, master, replica *redistest.Server) {
	t.Helper()
	start := time.Now()
	since := func() time.Duration { return time.Since(start) }
	ctx := sluice.WithKey(t.Context(), failoverKey)
	// lastRedis[i] is the latest instant limiter i decided by Redis.
	lastRedis := make([]atomic.Int64, len(ls))
	records := make([][]failoverRecord, 16)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range records {
		wg.Go(func() {
			li := g % len(ls)
			l := ls[li]
			for !stop.Load() {
				begin := since()
				d, tk := admitD(l, ctx, monoclock.Now())
				end := since()
				if d.Allowed {
					l.Done(tk, sluice.Success, monoclock.Now(), 0)
				}
				records[g] = append(records[g], failoverRecord{at: begin, took: end - begin, limiter: li, policy: d.Policy, allowed: d.Allowed})
				if d.Policy == l.Name() {
					lastRedis[li].Store(int64(begin))
				}
				time.Sleep(time.Millisecond) // pace: a thousand a second per goroutine at most
			}
		})
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()

	// Every limiter decides by Redis before the kill.
	waitRedis := func(after time.Duration, within time.Duration) bool {
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			all := true
			for i := range ls {
				if time.Duration(lastRedis[i].Load()) <= after {
					all = false
				}
			}
			if all {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	}
	require.True(t, waitRedis(0, 5*time.Second), "the limiters never decided by Redis before the kill")

	killed := since()
	master.Stop() // SIGKILL
	var promoted time.Duration
	deadline := time.Now().Add(30 * time.Second)
	for {
		if role, err := replica.Role(); err == nil && role == "master" {
			promoted = since()
			break
		}
		require.True(t, time.Now().Before(deadline), "the replica was not promoted within 30s of the kill")
		time.Sleep(5 * time.Millisecond)
	}
	back := waitRedis(promoted, backWithin+2*time.Second)
	time.Sleep(200 * time.Millisecond) // a little traffic on the healed Redis
	stop.Store(true)
	wg.Wait()
	require.True(t, back, "a limiter did not decide by Redis within %v of the promotion", backWithin+2*time.Second)

	t.Logf("killed at %v, promoted at %v (%v later)", killed, promoted, promoted-killed)
	for i, l := range ls {
		var first, fallbacks time.Duration = -1, 0
		var nFallback, closedAdmitted int
		var firstAt, lastAt time.Duration = -1, 0
		for _, rs := range records {
			for _, r := range rs {
				if r.limiter != i {
					continue
				}
				if firstAt < 0 || r.at < firstAt {
					firstAt = r.at
				}
				lastAt = max(lastAt, r.at+r.took)
				if r.policy == l.Name() {
					if r.at > promoted && (first < 0 || r.at < first) {
						first = r.at
					}
					if i == 1 && r.allowed {
						closedAdmitted++
					}
				} else {
					nFallback++
					fallbacks = max(fallbacks, r.took)
					if i == 1 {
						require.False(t, r.allowed, "the fail-closed limiter admitted by its failure policy: %+v", r)
					}
				}
				require.LessOrEqual(t, r.took, failoverTimeout+failoverSlack, "%s: a decision took %v: %+v", l.Name(), r.took, r)
			}
		}
		require.Positive(t, nFallback, "%s: its failure policy never answered", l.Name())
		require.GreaterOrEqual(t, first, time.Duration(0))
		t.Logf("%s: first Redis decision %v after the promotion; %d failure-policy decisions, the slowest in %v",
			l.Name(), first-promoted, nFallback, fallbacks)
		assert.LessOrEqual(t, first-promoted, backWithin, "%s: back on Redis too late", l.Name())
		if i == 1 {
			// A GCRA admits at most its burst plus its rate over any span.
			// The replica may have missed the master's last writes, each
			// of which could admit one more.
			const lostWrites = 2
			span := lastAt - firstAt
			bound := closedBurst + int(int64(span)*closedRate.Count/int64(closedRate.Period)) + 1 + lostWrites
			t.Logf("%s: %d admitted in %v, bound %d", l.Name(), closedAdmitted, span, bound)
			assert.LessOrEqual(t, closedAdmitted, bound, "the fail-closed limiter admitted over its bound")
		}
	}
}
