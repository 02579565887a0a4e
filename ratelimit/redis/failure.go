package redislimit

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// Breaker states, as StateChange and Event name them.
const (
	stateClosed uint32 = iota
	stateOpen
	stateHalfOpen
)

func stateName(s uint32) string {
	switch s {
	case stateOpen:
		return "open"
	case stateHalfOpen:
		return "half-open"
	}
	return "closed"
}

// redisBreaker is a consecutive-failure breaker around Redis: closed until
// threshold calls in a row fail, then open for openFor, then half-open with
// one probe whose success closes it and whose failure opens it again. A
// closed breaker is read with one atomic load.
type redisBreaker struct {
	state     atomic.Uint32
	fails     atomic.Int64
	mu        sync.Mutex
	openedAt  time.Duration
	probing   bool
	threshold int64
	openFor   time.Duration
}

type transition struct{ from, to uint32 }

func (t transition) changed() bool { return t.from != t.to }

// acquire reports whether a call may go to Redis at now, and whether it is
// the half-open probe.
func (b *redisBreaker) acquire(now time.Duration) (ok, probe bool, tr transition) {
	if b.state.Load() == stateClosed {
		return true, false, tr
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.state.Load()
	tr = transition{s, s}
	switch s {
	case stateClosed:
		return true, false, tr
	case stateOpen:
		if now-b.openedAt < b.openFor {
			return false, false, tr
		}
		b.state.Store(stateHalfOpen)
		b.probing = true
		tr.to = stateHalfOpen
		return true, true, tr
	default:
		if b.probing {
			return false, false, tr
		}
		b.probing = true
		return true, true, tr
	}
}

// success records a call that Redis answered.
func (b *redisBreaker) success(probe bool) transition {
	if !probe {
		if b.fails.Load() != 0 {
			b.fails.Store(0)
		}
		return transition{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	tr := transition{b.state.Load(), stateClosed}
	b.probing = false
	b.fails.Store(0)
	b.state.Store(stateClosed)
	return tr
}

// failure records a call that Redis failed at now.
func (b *redisBreaker) failure(now time.Duration, probe bool) transition {
	if !probe && b.fails.Add(1) < b.threshold {
		return transition{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.state.Load()
	if probe || (s == stateClosed && b.fails.Load() >= b.threshold) {
		b.probing = false
		b.openedAt = now
		b.state.Store(stateOpen)
		return transition{s, stateOpen}
	}
	return transition{s, s}
}

// openLeft returns how long the breaker stays open after now; openFor when it
// is not open.
func (b *redisBreaker) openLeft(now time.Duration) time.Duration {
	if b.state.Load() != stateOpen {
		return b.openFor
	}
	b.mu.Lock()
	left := b.openFor - (now - b.openedAt)
	b.mu.Unlock()
	if left <= 0 {
		return time.Millisecond
	}
	return left
}

// localShare keeps one local limiter per key for the FailLocal policy, with at
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
}

type negEntry struct {
	at, until time.Duration
	d         sluice.Decision
}

// get returns the remembered rejection of key at now, if one still holds.
func (c *negCache) get(key string, now time.Duration) (sluice.Decision, bool) {
	c.mu.Lock()
	e, ok := c.m[key]
	if ok && now >= e.until {
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

func (c *negCache) put(key string, now time.Duration, d sluice.Decision) {
	c.mu.Lock()
	defer c.mu.Unlock()
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
	c.m[key] = negEntry{at: now, until: now + d.RetryAfter, d: d}
}
