// Package statelog logs the state changes of a Guard's policies through a
// *slog.Logger: a breaker opening, a load guard starting to shed, a
// degradation switch flipping, the breaker a Redis limiter keeps around
// Redis opening (its failure policy engaged) and closing again.
//
//	logs, _ := statelog.New(slog.Default())
//	g, _ := sluice.New(sluice.WithName("payments"), sluice.With(payments), sluice.WithObserver(logs))
//
// Each record is at level Warn when a policy starts to refuse (open,
// shedding, on) and Info otherwise, with the attributes sluice.guard,
// sluice.policy, from and to. Records are rate-limited per policy, so a
// flapping breaker cannot flood the log: past the limit, changes are
// counted, and the next record says how many were left out (suppressed).
// The last change left out, the state the policy stays in (for a breaker
// group, that of each member, up to 16), is logged once the limit allows a
// record, or when the Guard closes; suppressed counts the changes that
// never will be.
// A Redis limiter's records say "Redis failure policy engaged" (Warn),
// "Redis tried again" and "Redis failure policy recovered".
package statelog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/isnil"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
)

// Logger is a sluice.Observer that logs the state changes of the policies
// of the Guards given it.
type Logger struct {
	log   *slog.Logger
	clock sluice.Clock
	burst int
	every time.Duration
}

// Option configures a Logger.
type Option func(*Logger) error

// WithLimit lets through at most burst records per policy at once, then one
// every interval. The default is 5 at once, then one every 10 seconds.
// burst and every must be positive.
func WithLimit(burst int, every time.Duration) Option {
	return func(l *Logger) error {
		if burst < 1 || every <= 0 {
			return fmt.Errorf("statelog: WithLimit(%d, %v): want a positive burst and interval", burst, every)
		}
		l.burst, l.every = burst, every
		return nil
	}
}

// WithClock makes the Logger's rate limit read c instead of
// sluice.SystemClock. The wait for the next record allowed, to log the
// last change left out, is a timer of the process's clock.
func WithClock(c sluice.Clock) Option {
	return func(l *Logger) error {
		if isnil.Of(c) {
			return errors.New("statelog: WithClock: nil clock")
		}
		l.clock = c
		return nil
	}
}

// New returns a Logger writing to log.
func New(log *slog.Logger, opts ...Option) (*Logger, error) {
	if log == nil {
		return nil, errors.New("statelog: nil *slog.Logger")
	}
	l := &Logger{log: log, clock: sluice.SystemClock, burst: 5, every: 10 * time.Second}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("statelog: nil Option")
		}
		if err := o(l); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Attach implements sluice.Observer: it subscribes to the state changes of
// every policy of g that reports them (sluice.StateSource); g's Close
// unsubscribes. It hears no calls.
func (l *Logger) Attach(g *sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	var unsubs []func()
	var logs []*policyLog
	for _, p := range g.Policies() {
		src, ok := p.(sluice.StateSource)
		if !ok {
			continue
		}
		_, redis := p.(*redislimit.Limiter)
		pl := &policyLog{l: l, guard: g.Name(), policy: p.Name(), redis: redis, tokens: float64(l.burst)}
		unsubs = append(unsubs, src.Subscribe(pl.changed))
		logs = append(logs, pl)
	}
	return nil, func() {
		for _, u := range unsubs {
			u()
		}
		for _, pl := range logs {
			pl.detach()
		}
	}, nil
}

// policyLog logs one policy's changes, within its Logger's rate.
type policyLog struct {
	l             *Logger
	guard, policy string
	redis         bool // a Redis limiter: its changes are its breaker around Redis

	// mu also orders the records: a change is written under it.
	mu      sync.Mutex
	tokens  float64
	last    time.Duration
	started bool
	// pending are the last changes left out, one per member (a breaker
	// group's changes come from its members; another policy has one): the
	// states they stay in when no change follows. timer writes them once a
	// record is allowed, or detach at once.
	pending []sluice.StateChange
	// dropped counts the changes left out for good: those a later change
	// of their member replaced, and those past maxPending members.
	dropped  int
	timer    *time.Timer
	gen      uint64 // the timer's, which detach stops
	detached bool
}

// maxPending is the most members whose last change left out a policy
// keeps to write.
const maxPending = 16

func (p *policyLog) changed(c sluice.StateChange) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.detached {
		return
	}
	p.refill()
	if p.timer != nil && p.tokens >= 1 {
		// The token the timer waits for is back: the changes left out go
		// first, in order, as the limit allows.
		p.timer.Stop()
		p.timer = nil
		p.writeAllowed()
	}
	i := slices.IndexFunc(p.pending, func(q sluice.StateChange) bool { return q.Policy == c.Policy })
	if p.tokens < 1 || len(p.pending) > 0 {
		switch {
		case i >= 0:
			p.pending[i] = c
			p.dropped++
		case len(p.pending) < maxPending:
			p.pending = append(p.pending, c)
		default:
			p.dropped++
		}
		if p.timer == nil {
			p.arm()
		}
		return
	}
	p.tokens--
	p.write(c)
}

// refill adds the tokens earned since the last change.
func (p *policyLog) refill() {
	now := p.l.clock.Now()
	if p.started {
		p.tokens = min(p.tokens+float64(now-p.last)/float64(p.l.every), float64(p.l.burst))
	}
	p.started, p.last = true, now
}

// flush writes the changes left out, if the timer of generation gen is
// still the one waiting for them: it fires once the next record is allowed
// (on the Logger's clock if that runs in step with the process's).
func (p *policyLog) flush(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.timer == nil || p.gen != gen || p.detached {
		return // detach wrote them
	}
	p.timer = nil
	p.refill()
	p.tokens = max(p.tokens, 1) // the one the timer waited for
	p.writeAllowed()
}

// writeAllowed writes as many of the changes left out as the limit allows
// now, oldest first, and arms the timer for the others. p.mu is held.
func (p *policyLog) writeAllowed() {
	n := min(int(p.tokens), len(p.pending))
	p.tokens -= float64(n)
	for _, c := range p.pending[:n] {
		p.write(c)
	}
	p.pending = slices.Delete(p.pending, 0, n)
	if len(p.pending) > 0 {
		p.arm()
	}
}

// arm starts the timer that writes the changes left out once a record is
// allowed. p.mu is held.
func (p *policyLog) arm() {
	wait := time.Duration((1 - p.tokens) * float64(p.l.every))
	p.gen++
	gen := p.gen
	p.timer = time.AfterFunc(wait, func() { p.flush(gen) })
}

// detach writes the changes left out, if any, and ends p's records.
func (p *policyLog) detach() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.detached {
		return
	}
	p.detached = true
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.writePending()
}

// writePending writes the changes left out, in the order they were first
// left out. p.mu is held.
func (p *policyLog) writePending() {
	for _, c := range p.pending {
		p.write(c)
	}
	p.pending = p.pending[:0]
}

// write logs c, saying how many changes before it were left out for good.
// p.mu is held.
func (p *policyLog) write(c sluice.StateChange) {
	suppressed := p.dropped
	p.dropped = 0
	level, msg := describe(c, p.redis)
	attrs := []slog.Attr{
		slog.String("sluice.guard", p.guard),
		slog.String("sluice.policy", p.policy),
		slog.String("from", c.From),
		slog.String("to", c.To),
	}
	if c.Policy != p.policy {
		// A breaker group's member: the member's name is the key it
		// serves, for the log only, never for metrics.
		attrs = append(attrs, slog.String("member", c.Policy))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	p.l.log.LogAttrs(context.Background(), level, msg, attrs...)
}

// redisMessages are the messages of a Redis limiter's changes, by the
// state of its breaker around Redis.
var redisMessages = map[string]string{
	"open":      "sluice: Redis failure policy engaged",
	"half-open": "sluice: Redis tried again",
	"closed":    "sluice: Redis failure policy recovered",
}

// describe returns the level and message of a change, of a Redis
// limiter's breaker around Redis when redis.
func describe(c sluice.StateChange, redis bool) (slog.Level, string) {
	if msg, ok := redisMessages[c.To]; redis && ok {
		if c.To == "open" {
			return slog.LevelWarn, msg
		}
		return slog.LevelInfo, msg
	}
	switch c.To {
	case "open":
		return slog.LevelWarn, "sluice: circuit breaker opened"
	case "half-open":
		return slog.LevelInfo, "sluice: circuit breaker half-open"
	case "closed":
		return slog.LevelInfo, "sluice: circuit breaker closed"
	case "shedding":
		return slog.LevelWarn, "sluice: load guard shedding"
	case "normal":
		return slog.LevelInfo, "sluice: load guard recovered"
	case "on":
		return slog.LevelWarn, "sluice: switch flipped on"
	case "off":
		return slog.LevelInfo, "sluice: switch flipped off"
	}
	return slog.LevelInfo, "sluice: state changed"
}
