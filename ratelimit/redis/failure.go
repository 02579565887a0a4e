package redislimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
)

// redisBreaker is the sluice breaker around Redis: a breaker.Breaker that
// opens after a number of consecutive failed calls, stays open for a fixed
// time during which decisions go to the failure policy without touching
// Redis, then lets one probe through, whose success closes it. A closed
// breaker costs one atomic load per call.
type redisBreaker struct {
	b        *breaker.Breaker
	openFor  time.Duration
	openedAt atomic.Int64 // the instant it last opened
}

func newRedisBreaker(failures int, openFor time.Duration) (*redisBreaker, error) {
	// failures in a row, as every failure among the last failures calls:
	// the consecutive-failure strategy would also trip on calls merely
	// slower than 25 ms, which a Redis within its timeout is not failing.
	b, err := breaker.New("redis", breaker.WithCountWindow(failures), breaker.WithErrorRatio(1, failures),
		breaker.WithOpenDuration(openFor))
	if err != nil {
		return nil, fmt.Errorf("redislimit: breaker around Redis: %w", err)
	}
	return &redisBreaker{b: b, openFor: openFor}, nil
}

// acquire reports whether a call may go to Redis at now, with the ticket to
// report its end with.
func (rb *redisBreaker) acquire(now time.Duration) (sluice.Ticket, bool) {
	t, _, cause := rb.b.Admit(context.Background(), now)
	return t, cause == nil
}

// success records a call that Redis answered.
func (rb *redisBreaker) success(t sluice.Ticket, now time.Duration) {
	rb.b.Done(t, sluice.Success, now, 0)
}

// ignore ends a ticket whose call never reached a verdict on Redis.
func (rb *redisBreaker) ignore(t sluice.Ticket, now time.Duration) {
	rb.b.Done(t, sluice.Ignored, now, 0)
}

// failure records a call that Redis failed at now. When it opens the
// breaker, the instant is kept here, not learnt from the breaker's state
// notifications, which another goroutine may still be delivering.
func (rb *redisBreaker) failure(t sluice.Ticket, now time.Duration) {
	was := rb.b.State()
	rb.b.Done(t, sluice.Failure, now, 0)
	if was != breaker.StateOpen && rb.b.State() == breaker.StateOpen {
		rb.openedAt.Store(int64(now))
	}
}

// openLeft returns how long the breaker stays open after now; the open time
// when it is not open.
func (rb *redisBreaker) openLeft(now time.Duration) time.Duration {
	if rb.b.State() != breaker.StateOpen {
		return rb.openFor
	}
	left := rb.openFor - (now - time.Duration(rb.openedAt.Load()))
	if left <= 0 {
		return time.Millisecond
	}
	return left
}

// localShare keeps one local limiter per key for the failLocal policy, with at
// most max keys.
type localShare struct {
	mu   sync.Mutex
	m    map[string]sluice.Policy
	max  int
	make func() (sluice.Policy, error)
}

func (s *localShare) get(key string) (sluice.Policy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.m[key]; ok {
		return p, nil
	}
	p, err := s.make()
	if err != nil {
		return nil, err
	}
	if len(s.m) >= s.max {
		for k := range s.m {
			delete(s.m, k)
			break
		}
	}
	s.m[key] = p
	return p, nil
}

// negCache remembers rejections until their RetryAfter has passed.
type negCache struct {
	mu  sync.Mutex
	m   map[string]negEntry
	max int
	// gen counts the forgets, by a stripe of the keys: a rejection of a key
	// read from Redis before one of its stripe, and put after it, may be of
	// the quota given back, and is not kept. (One count for all keys would
	// keep none while releases come steadily, as behind an open breaker.)
	gen  [negStripes]uint64
	seed maphash.Seed
}

// negStripes is how many stripes of keys the negative cache counts its
// forgets by.
const negStripes = 64

func (c *negCache) stripe(key string) int { return int(maphash.String(c.seed, key) % negStripes) }

type negEntry struct {
	at, until time.Duration
	d         sluice.Decision
	// nums are the numbers of the limit the rejection was decided under
	// (its script arguments): under others (SetLimit, on the limit or on
	// a member of an All), it holds no more.
	period, quota any
}

// get returns the remembered rejection of key at now, if one still holds
// for a limit whose numbers are n.
func (c *negCache) get(key string, now time.Duration, n *limitNums) (sluice.Decision, bool) {
	c.mu.Lock()
	e, ok := c.m[key]
	if ok && (now >= e.until || e.period != n.periodArg || e.quota != n.quotaArg) {
		delete(c.m, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok || now < e.at {
		return sluice.Decision{}, false
	}
	d := e.d
	d.RetryAfter = e.until - now
	if d.Reset -= now - e.at; d.Reset < d.RetryAfter {
		d.Reset = d.RetryAfter
	}
	return d, true
}

// forget forgets key's remembered rejection: the quota it was turned away
// for has been given back.
func (c *negCache) forget(key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.gen[c.stripe(key)]++
	c.mu.Unlock()
}

// generation returns the count of forgets of key's stripe so far, for put.
func (c *negCache) generation(key string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen[c.stripe(key)]
}

// clear forgets every remembered rejection.
func (c *negCache) clear() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}

// put remembers key's rejection d at now, under the limit's numbers period
// and quota, unless a key of its stripe was forgotten since generation gen,
// when Redis was asked.
func (c *negCache) put(key string, now time.Duration, d sluice.Decision, period, quota any, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen[c.stripe(key)] != gen {
		return
	}
	if len(c.m) >= c.max {
		for k, e := range c.m {
			if now >= e.until {
				delete(c.m, k)
			}
		}
		if len(c.m) >= c.max {
			return
		}
	}
	c.m[key] = negEntry{at: now, until: now + d.RetryAfter, d: d, period: period, quota: quota}
}
