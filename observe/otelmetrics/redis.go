package otelmetrics

import (
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
)

// ObserveRedis counts what a Redis limiter reports, for
// sluice.redis.errors and sluice.redis.failure_policy.decisions: give it
// to the limiter as its observer, redislimit.WithObserver(m.ObserveRedis).
// The series carry the limiter's name as sluice.policy; a limiter's
// counts start with its first event, and outlive it.
func (m *Metrics) ObserveRedis(e redislimit.Event) {
	var c *redisCounts
	if v, ok := m.redis.Load(e.Policy); ok {
		c = v.(*redisCounts)
	} else {
		v, _ := m.redis.LoadOrStore(e.Policy, &redisCounts{start: time.Now()})
		c = v.(*redisCounts)
	}
	switch e.Kind {
	case redislimit.EventRedisError:
		et := errOther
		if isTimeout(e.Err) {
			et = errTimeout
		}
		c.errors[et].Add(1)
	case redislimit.EventFallback:
		if e.Decision.Allowed {
			c.decisions[1].Add(1)
		} else {
			c.decisions[0].Add(1)
		}
	}
}

// redisCounts are one Redis limiter's counts.
type redisCounts struct {
	start     time.Time
	errors    [errorTypes]atomic.Uint64 // by error type: timeout, other
	decisions [2]atomic.Uint64          // rejected, admitted
}

// collectRedis adds the Redis limiters' counts to b.
func (m *Metrics) collectRedis(b *builder) {
	all := map[string]*redisCounts{}
	m.redis.Range(func(k, v any) bool {
		all[k.(string)] = v.(*redisCounts)
		return true
	})
	for _, name := range slices.Sorted(maps.Keys(all)) {
		c, policy := all[name], attribute.String("sluice.policy", name)
		for et := errTimeout; et < errorTypes; et++ {
			if n := c.errors[et].Load(); n > 0 {
				b.int(redisErrors, int64(n), attribute.NewSet(policy, attribute.String("error.type", errorTypeNames[et])), c.start)
			}
		}
		for i, r := range []string{"rejected", "admitted"} {
			if n := c.decisions[i].Load(); n > 0 {
				b.int(redisDecisions, int64(n), attribute.NewSet(policy, attribute.String("sluice.result", r)), c.start)
			}
		}
	}
}

// isTimeout reports whether err is a timeout: the context's deadline, or
// one on the connection (a Redis that accepts and never answers, with the
// client's ContextTimeoutEnabled: an i/o timeout, not the context's error).
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
