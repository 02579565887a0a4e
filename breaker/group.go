package breaker

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
)

// Group is a sluice.Policy keeping one Breaker per resource (an HTTP route,
// a gRPC method, a dependency's host), so one failing dependency does not
// open the circuit of the others. A request's key comes from
// sluice.ResourceFrom, or from the WithKeyFunc option; its breaker is made on
// first use from the Group's options, named after the Group followed by "/"
// and the key.
//
// A Group holds at most WithMaxBreakers breakers (1024 by default). When a
// new key arrives at a full Group, the closed breaker used least recently is
// dropped (finding it scans the Group); open and half-open breakers are kept,
// since forgetting them would let traffic through to a failing dependency,
// and so are those held by ForceClose. Only when no closed one can be
// dropped is one that has gone idle dropped instead: an open one whose open
// period is over for as long again as the longest one, with no call of its
// key since, or a half-open one with no probe in flight (its last probe's
// caller went away) and no call of its key for as long. When none can be
// dropped, new keys share one overflow breaker
// until a slot frees up.
//
// Decisions carry the Group's name. A Group is a sluice.StateSource: its
// subscribers hear the changes of every member, under the member's name. It
// is safe for concurrent use; make one with NewGroup.
type Group struct {
	name string
	cfg  *config
	max  int

	members sync.Map // key → *member
	chunks  []atomic.Pointer[chunk]
	gens    atomic.Uint64
	subs    notifier // the listeners of every member's changes
	// memberCfg is the members' configuration: cfg, with Reconfigure's
	// numbers; guarded by mu.
	memberCfg *config

	mu       sync.Mutex // guards creation, eviction and the fields below
	all      []*member
	free     []uint32
	next     uint32
	overflow *member
}

const chunkSize = 1024

type chunk [chunkSize]atomic.Pointer[member]

type member struct {
	key    string
	slot   uint32
	b      *Breaker
	last   atomic.Int64 // instant of the last Admit
	idx    int          // position in Group.all
	shared bool         // the overflow breaker
}

// NewGroup returns a Group named "breaker/" + name. It takes every option of
// New, applied to each member, and WithKeyFunc and WithMaxBreakers.
func NewGroup(name string, opts ...Option) (*Group, error) {
	if name == "" {
		return nil, errors.New("breaker: NewGroup: empty name")
	}
	cfg, err := buildConfig(forGroup, opts)
	if err != nil {
		return nil, err
	}
	g := &Group{name: "breaker/" + name, cfg: cfg, max: cfg.maxBreakers}
	mc := *cfg
	g.memberCfg = &mc
	// One more slot than members, for the overflow breaker.
	g.chunks = make([]atomic.Pointer[chunk], (g.max+1+chunkSize-1)/chunkSize)
	return g, nil
}

// Name returns "breaker/" followed by the name given to NewGroup.
func (g *Group) Name() string { return g.name }

// Needs returns what its breakers need of a Guard, as [Breaker.Needs]
// says (they are all made alike), and sluice.NeedsResource: its key
// function, the call's resource by default, reads the call's context.
func (g *Group) Needs() sluice.Needs {
	return needs(g.cfg, g.cfg.clock == sluice.SystemClock) | sluice.NeedsResource
}

// Len returns the number of keys the Group holds a breaker for; the
// overflow breaker, which keys share once WithMaxBreakers is reached, is
// not one.
func (g *Group) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.all)
}

// Get returns the breaker of key, if the Group holds one.
func (g *Group) Get(key string) (*Breaker, bool) {
	if m, ok := g.members.Load(key); ok {
		return m.(*member).b, true
	}
	return nil, false
}

// Admit decides on a request at instant now with the breaker of its key,
// made on first use. It is the sluice.Policy method.
func (g *Group) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	m := g.use(ctx, now)
	t, q, cause := m.b.Admit(ctx, now)
	if cause == nil {
		t = sluice.Ticket(m.slot)<<32 | t&math.MaxUint32
	}
	return t, q, cause
}

// Done reports how a request ended to the breaker that admitted it; a
// breaker dropped from the Group since then ignores it. It is the
// sluice.Policy method.
func (g *Group) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	slot := uint32(t >> 32)
	if int(slot/chunkSize) >= len(g.chunks) {
		return
	}
	c := g.chunks[slot/chunkSize].Load()
	if c == nil {
		return
	}
	if m := c[slot%chunkSize].Load(); m != nil {
		m.b.Done(t&math.MaxUint32, o, now, latency)
	}
}

// OpenFor opens, as Breaker.OpenFor does, the breaker of the key of a
// request made with ctx (the breaker Admit would ask for it, made on first
// use): the adapters call it, as a sluice.Opener, with the request's context
// when a dependency's Retry-After or RetryInfo asks to hold off, so that only
// that key's breaker is held open. A key without a breaker of its own, at a
// full Group (see WithMaxBreakers), holds nothing open: the overflow breaker
// it shares serves keys that did not ask to wait.
func (g *Group) OpenFor(ctx context.Context, now, d time.Duration) {
	if d <= 0 {
		return
	}
	if m := g.use(ctx, now); !m.shared {
		m.b.OpenFor(ctx, now, d)
	}
}

// Subscribe registers fn, called after every state change of every member,
// with the member's name; see Breaker.Subscribe for the guarantees. It
// implements sluice.StateSource.
func (g *Group) Subscribe(fn func(sluice.StateChange)) (unsubscribe func()) {
	if fn == nil {
		return func() {}
	}
	return g.subs.add(subscriber{fn: fn})
}

// use returns the member of the request's key, marked as used at now.
func (g *Group) use(ctx context.Context, now time.Duration) *member {
	m := g.member(g.cfg.key(ctx), now)
	if last := m.last.Load(); now-time.Duration(last) >= time.Millisecond || time.Duration(last) > now {
		m.last.Store(int64(now))
	}
	return m
}

func (g *Group) member(key string, now time.Duration) *member {
	if m, ok := g.members.Load(key); ok {
		return m.(*member)
	}
	m, dropped := g.add(key, now)
	if dropped != nil {
		dropped.dispatch() // its close, out of g.mu: a listener may read g
	}
	return m
}

// add returns the member of key, made if need be, and the open breaker
// dropped for it, if any, whose close is queued for its listeners.
func (g *Group) add(key string, now time.Duration) (*member, *Breaker) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if m, ok := g.members.Load(key); ok {
		return m.(*member), nil
	}
	var dropped *Breaker
	if len(g.all) >= g.max && !g.evict(now, &dropped) {
		if g.overflow == nil {
			g.overflow = g.newMember("(overflow)", now)
			g.overflow.shared = true
		}
		return g.overflow, nil
	}
	m := g.newMember(key, now)
	m.idx = len(g.all)
	g.all = append(g.all, m)
	g.members.Store(key, m)
	return m, dropped
}

// droppable reports whether m, whose phase is p, is a breaker that is not
// closed gone idle at now: not forced; open, its open period over for as
// long again as the longest one, with no call of its key since it ended;
// or half-open with no probe in flight (the last one's caller went away,
// or it ended and more are needed) and no call of its key for as long. Its dependency is gone (a host
// dropped from discovery) or unused; kept, it would hold its slot for
// good, for no call ever comes to probe it.
func (g *Group) droppable(m *member, p *phase, now time.Duration) bool {
	if p.forced {
		return false
	}
	last := time.Duration(m.last.Load())
	switch p.state {
	case StateOpen:
		return now-p.openUntil >= g.memberCfg.openMax && last < p.openUntil
	case StateHalfOpen:
		// No probe in flight: each admitted one was given back, or ended
		// with an outcome that left it half-open (more successes needed),
		// or hangs past its wait (it counts as failed at the next call).
		return (p.taken.Load() == p.settled.Load() || m.b.hung(p, now)) && now-last >= g.memberCfg.openMax
	}
	return false
}

// newMember makes a breaker in a free slot. Called with g.mu held.
func (g *Group) newMember(key string, now time.Duration) *member {
	var slot uint32
	if n := len(g.free); n > 0 {
		slot, g.free = g.free[n-1], g.free[:n-1]
	} else {
		slot = g.next
		g.next++
	}
	// Each breaker starts at a generation far from its slot's previous ones,
	// so a ticket of a dropped breaker is not taken for one of its successor.
	base := g.gens.Add(0x9E3779B97F4A7C15)
	b := newBreaker(g.name+"/"+key, g.memberCfg, base)
	b.sink = &g.subs
	m := &member{key: key, slot: slot, b: b}
	m.last.Store(int64(now))
	c := g.chunks[slot/chunkSize].Load()
	if c == nil {
		c = new(chunk)
		g.chunks[slot/chunkSize].Store(c)
	}
	c[slot%chunkSize].Store(m)
	return m
}

// evict drops the closed breaker used least recently, or else the idle
// one that is not (see droppable) used least recently, at the instant now, and
// reports whether it found one; an open one is closed as it goes, and set
// in dropped for its change to be delivered. Called with g.mu held.
func (g *Group) evict(now time.Duration, dropped **Breaker) bool {
	var victim *member
	for {
		victim = nil
		idle := false // victim is an idle breaker that is not closed
		for _, m := range g.all {
			p := m.b.cur.Load()
			closed := p.state == StateClosed && !p.forced
			if !closed && !g.droppable(m, p, now) {
				continue
			}
			switch {
			case victim == nil, closed && idle:
				victim, idle = m, !closed
			case closed == !idle && m.last.Load() < victim.last.Load():
				victim = m
			}
		}
		if victim == nil {
			return false
		}
		// Its state is looked at again under its lock, where it changes: a
		// breaker that tripped since is kept, and another one is chosen.
		victim.b.mu.Lock()
		if p := victim.b.cur.Load(); p.state == StateClosed && !p.forced || g.droppable(victim, p, now) {
			if p.state != StateClosed {
				// Its listeners, the Group's among them, last heard it
				// open or half-open: it closes as it goes, so that none
				// counts it so for good (degrade.StateSignal).
				victim.b.setPhase(p, StateClosed, now, 0, false)
				*dropped = victim.b
			}
			victim.b.gone = true
			victim.b.mu.Unlock()
			break
		}
		victim.b.mu.Unlock()
	}
	g.members.Delete(victim.key)
	g.chunks[victim.slot/chunkSize].Load()[victim.slot%chunkSize].Store(nil)
	g.free = append(g.free, victim.slot)
	last := g.all[len(g.all)-1]
	g.all[victim.idx], last.idx = last, victim.idx
	g.all = g.all[:len(g.all)-1]
	return true
}

var (
	_ sluice.Policy      = (*Group)(nil)
	_ sluice.StateSource = (*Group)(nil)
	_ sluice.Opener      = (*Group)(nil)
)
