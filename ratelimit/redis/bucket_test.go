package redislimit

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policywindow"
	"github.com/sluice-go/sluice/ratelimit"
)

// redisTime is the prologues' reading of Redis TIME, which atInstant
// replaces.
const redisTime = "local t = redis.call('TIME')\nlocal now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"

// atInstant returns s deciding at the instant (µs) given as its last
// argument instead of Redis TIME, for step tables at fixed instants.
func atInstant(t *testing.T, s *script) *script {
	t.Helper()
	require.Equal(t, 1, strings.Count(s.src, redisTime))
	return newScript(strings.Replace(s.src, redisTime, "local now = tonumber(ARGV[#ARGV])\nARGV[#ARGV] = nil\n", 1))
}

// ringStep is one request of a ring's scenario: at an instant (from the
// table's base), of a cost, released afterwards or not; requests of one
// batch go to the batch script together.
type ringStep struct {
	at      time.Duration
	n       int64
	release bool
	batch   int // steps of one non-zero batch are consecutive and at one instant
}

// TestSlidingWindowStepsMatchLocal runs a scenario through the ring's
// scripts at fixed instants: the one-limit script, the script of All and of
// refunds, and the batch script; each decision equals
// ratelimit.SlidingWindow's at the same instant, Remaining, Reset and
// RetryAfter included, and so do the refunds' effects.
func TestSlidingWindowStepsMatchLocal(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s.Addr)
	const limit, buckets = 5, 4
	const window = time.Second
	const bucketUS = int64(window/time.Microsecond) / buckets
	ms := time.Millisecond
	steps := []ringStep{
		{at: 0, n: 1},
		{at: 0, n: 2},
		{at: 100 * ms, n: 1, release: true}, // given back within its bucket
		{at: 100 * ms, n: 1},
		{at: 260 * ms, n: 1},  // the second bucket: 5 counted
		{at: 300 * ms, n: 2},  // rejected until the first bucket leaves at 1s
		{at: 999 * ms, n: 1},  // 1 ms before it does
		{at: 1000 * ms, n: 3}, // it has: 1 counted
		{at: 1000 * ms, n: 1, release: true},
		{at: 1100 * ms, n: 1, batch: 1},
		{at: 1100 * ms, n: 1, batch: 1},
		{at: 1100 * ms, n: 2, batch: 1}, // rejected in the batch
		{at: 1100 * ms, n: 1, batch: 1},
		{at: 1250 * ms, n: 5},
		{at: 1499 * ms, n: 2, release: true},
		{at: 1500 * ms, n: 1},
		{at: 4000 * ms, n: 5}, // the whole ring left the window
		{at: 3900 * ms, n: 1}, // TIME steps back: counted in the newest bucket
		{at: 4100 * ms, n: 1, batch: 2},
		{at: 4100 * ms, n: 5, batch: 2},
		{at: 5249 * ms, n: 4, release: true},
		{at: 5250 * ms, n: 5},
		{at: 9000 * ms, n: 1, release: true},
	}
	base := int64(1_700_000_000_000_000) // µs, a multiple of the bucket
	single, batch := bucketScripts(strconv.Itoa(buckets))
	single, batch = atInstant(t, single), atInstant(t, batch)
	decide := atInstant(t, decideScript)
	alg := "b" + strconv.Itoa(buckets)
	a, b := strconv.FormatInt(bucketUS, 10), strconv.Itoa(limit)

	ctx := context.Background()
	local := map[string]*ratelimit.SlidingWindow{}
	for _, path := range []string{"single", "all", "batch"} {
		w, err := ratelimit.NewSlidingWindow(limit, window, buckets)
		require.NoError(t, err)
		local[path] = w
	}
	key := func(path string) []string {
		return []string{defaultPrefix + ":test/ring/" + path + uniqueName("") + ":{x}"}
	}
	keys := map[string][]string{"single": key("single"), "all": key("all"), "batch": key("batch")}

	refund := func(path string, now, n, mark int64) {
		require.NoError(t, decide.Run(ctx, c, keys[path], "r", alg, a, b, n, mark, now).Err())
	}
	parse := func(reply string, count int) ([]sluice.Decision, []int64) {
		ds, marks := make([]sluice.Decision, count), make([]int64, count)
		r := replyReader{s: reply}
		for i := range ds {
			var ok bool
			ds[i], marks[i], ok = r.decision()
			require.True(t, ok, "reply %q", reply)
		}
		require.True(t, r.end(), "reply %q", reply)
		return ds, marks
	}
	check := func(path string, i int, st ringStep, now int64, rd sluice.Decision, mark int64) {
		at := time.Duration(now) * time.Microsecond
		ld, tk := admitD(local[path], sluice.WithCost(ctx, st.n), at)
		rd.Limit = limit
		ld.Policy, ld.Cause, rd.Cause = "", nil, nil
		if ld.Allowed {
			ld.RetryAfter = 0
		}
		require.Equal(t, ld, rd, "%s step %d (%+v)", path, i, st)
		if st.release && ld.Allowed {
			local[path].Done(tk, sluice.Released, at, 0)
			refund(path, now, st.n, mark)
		}
	}
	for i := 0; i < len(steps); i++ {
		st := steps[i]
		now := base + int64(st.at/time.Microsecond)
		if st.n > limit {
			// A Limiter answers such a cost itself (ErrNeverSatisfiable);
			// the scripts are never asked.
			continue
		}
		reply, err := single.Run(ctx, c, keys["single"], a, b, st.n, now).Text()
		require.NoError(t, err)
		ds, marks := parse(reply, 1)
		check("single", i, st, now, ds[0], marks[0])

		reply, err = decide.Run(ctx, c, keys["all"], "a", alg, a, b, st.n, "0", now).Text()
		require.NoError(t, err)
		ds, marks = parse(reply, 1)
		check("all", i, st, now, ds[0], marks[0])

		group := []ringStep{st}
		for st.batch != 0 && i+1 < len(steps) && steps[i+1].batch == st.batch {
			i++
			group = append(group, steps[i])
		}
		if len(group) > 1 {
			// The one-request paths decide the rest of the batch in turn.
			for j, g := range group[1:] {
				if g.n > limit {
					continue
				}
				reply, err := single.Run(ctx, c, keys["single"], a, b, g.n, now).Text()
				require.NoError(t, err)
				ds, marks := parse(reply, 1)
				check("single", i-len(group)+2+j, g, now, ds[0], marks[0])
				reply, err = decide.Run(ctx, c, keys["all"], "a", alg, a, b, g.n, "0", now).Text()
				require.NoError(t, err)
				ds, marks = parse(reply, 1)
				check("all", i-len(group)+2+j, g, now, ds[0], marks[0])
			}
		}
		args := []any{a, b}
		var sent []ringStep
		for _, g := range group {
			if g.n <= limit {
				args = append(args, g.n)
				sent = append(sent, g)
			}
		}
		reply, err = batch.Run(ctx, c, keys["batch"], append(args, now)...).Text()
		require.NoError(t, err)
		ds, marks = parse(reply, len(sent))
		for j, g := range sent {
			check("batch", i, g, now, ds[j], marks[j])
		}
	}
	// Every key the scripts wrote expires.
	for _, k := range keys {
		pttl, err := c.PTTL(ctx, k[0]).Result()
		require.NoError(t, err)
		assert.True(t, pttl != -1, "%s has no TTL", k[0])
	}
}

func TestSlidingWindowRejectsBadParameters(t *testing.T) {
	c := newClient(t, "127.0.0.1:1")
	for name, err := range map[string]error{
		"limit 0":         func() error { _, err := NewSlidingWindow(c, 0, time.Second, 10); return err }(),
		"0 buckets":       func() error { _, err := NewSlidingWindow(c, 1, time.Second, 0); return err }(),
		"257 buckets":     func() error { _, err := NewSlidingWindow(c, 1, time.Second, 257); return err }(),
		"sub-µs bucket":   func() error { _, err := NewSlidingWindow(c, 1, 10*time.Microsecond, 20); return err }(),
		"uneven buckets":  func() error { _, err := NewSlidingWindow(c, 1, 10*time.Microsecond, 3); return err }(),
		"sub-µs window":   func() error { _, err := NewSlidingWindow(c, 1, 1500*time.Nanosecond, 1); return err }(),
		"window too long": func() error { _, err := NewSlidingWindow(c, 1, 1<<51*time.Microsecond, 1); return err }(),
		"limit over 2^52": func() error { _, err := NewSlidingWindow(c, 1<<53, time.Second, 1); return err }(),
		"bad option":      func() error { _, err := NewSlidingWindow(c, 1, time.Second, 1, WithName("")); return err }(),
		// No metric label could carry it: a scrape would fail.
		"name not UTF-8": func() error { _, err := NewSlidingWindow(c, 1, time.Second, 1, WithName("w\xff")); return err }(),
		// The breaker keeps the last failures outcomes: a run past a
		// thousand is no breaker, and would cost a ring as long.
		"breaker past 1024": func() error {
			_, err := NewSlidingWindow(c, 1, time.Second, 1, WithBreaker(1025, time.Second))
			return err
		}(),
	} {
		assert.Error(t, err, name)
	}
	l, err := NewSlidingWindow(c, 10, time.Minute, 6)
	require.NoError(t, err)
	assert.Equal(t, time.Minute, policywindow.Of(l))
	assert.Equal(t, "ratelimit/redis/sliding-window", l.Name())
}
