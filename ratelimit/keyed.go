package ratelimit

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/isnil"
	"github.com/sluice-go/sluice/internal/monoclock"
	"github.com/sluice-go/sluice/internal/policywindow"
	"github.com/sluice-go/sluice/internal/shedhook"
)

// ErrNoKey is the cause of a Keyed rejection of a request that carries no
// key (see sluice.WithKey) when the Keyed was built with RequireKey. It wraps
// sluice.ErrRateLimited; waiting does not help, so such rejections carry no
// RetryAfter.
var ErrNoKey = fmt.Errorf("%w: the request carries no key", sluice.ErrRateLimited)

// defaultMaxKeys is the number of keys a Keyed holds unless set with
// WithMaxKeys.
const defaultMaxKeys = 100_000

// WithMaxKeys caps the number of keys a Keyed holds at once; when a new key
// comes to a full Keyed, the least recently used key of its shard with no
// call in flight is evicted (its limiter is forgotten, so that key starts
// afresh if it comes back); when all have one, the new key is held over
// the cap until some are idle.
// The default is 100,000. NewKeyed only.
func WithMaxKeys(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("ratelimit: WithMaxKeys(%d): want at least 1", n)
		}
		o.maxKeys = n
		o.keyedOption("WithMaxKeys")
		return nil
	}
}

// WithIdleTTL makes a Keyed forget a key that has seen no request for ttl
// and has no call in flight: the next request with that key gets a fresh
// limiter. NewKeyed refuses a ttl shorter than the time the key's limiter
// takes to become whole again (its window, its burst's refill, or a
// Shaper's longest wait and one turn of a unit request; a key whose Shaper
// still has turns taken, by a costlier request, is kept until they pass), for
// forgetting a key sooner hands out quota early. Expired
// keys are dropped lazily, when met on the request path, when a new key
// needs room, and by the janitor if one runs (WithJanitor). The default,
// 0, never forgets an idle key; WithMaxKeys still bounds memory. NewKeyed
// only.
func WithIdleTTL(ttl time.Duration) Option {
	return func(o *options) error {
		if ttl < 0 {
			return fmt.Errorf("ratelimit: WithIdleTTL(%v): negative", ttl)
		}
		o.idleTTL = ttl
		o.keyedOption("WithIdleTTL")
		return nil
	}
}

// WithJanitor makes a Keyed start a goroutine that drops the keys idle for
// the idle TTL every interval, reading the Keyed's clock (WithClock); Close
// stops it. It needs WithIdleTTL. The default is no janitor: idle keys are
// dropped on the request path only, one or two at a time, never by a sweep.
// NewKeyed only.
func WithJanitor(interval time.Duration) Option {
	return func(o *options) error {
		if interval <= 0 {
			return fmt.Errorf("ratelimit: WithJanitor(%v): interval must be positive", interval)
		}
		o.janitor = interval
		o.keyedOption("WithJanitor")
		return nil
	}
}

// RequireKey makes a Keyed reject every request that carries no key with
// ErrNoKey. By default such requests are limited under the empty key "":
// they share one limiter. NewKeyed only.
func RequireKey() Option {
	return func(o *options) error {
		o.requireKey = true
		o.keyedOption("RequireKey")
		return nil
	}
}

// Keyed keeps one limiter per key, the key read from the request's context
// (sluice.KeyFrom, set by the adapters from a client IP, a user, a header),
// and decides each request with its key's limiter.
//
// Keys are spread over up to 64 shards, each with its own lock, map and
// least-recently-used list, so no lock is global. Memory is bounded: at most
// WithMaxKeys keys are held, one past 128 bytes as a digest of 17 (each
// shard holds its share, at least 128 keys, and evicts its own least
// recently used key, so eviction may start a little before the cap when
// keys hash unevenly), and keys idle for WithIdleTTL are
// forgotten. A key with a call in flight is in use: it is neither evicted
// nor forgotten (its next request would start afresh beside the running
// call), and a shard whose keys all have one holds a new key over its
// share until some are idle, so that the keys over the cap are never more
// than the calls in flight. Nothing on the request path walks the keys: an expired key is
// dropped when met, and a new key drops at most two expired ones from the end
// of its shard's list on its way in; the janitor, if one runs (WithJanitor),
// walks them all. No goroutine runs unless WithJanitor asks for one.
//
// The list is kept in least-recently-used order loosely: a key used again
// moves to the front only once a quarter of its shard's capacity of other
// keys has moved there since it did, so a busy key costs no writes to its
// neighbours. The key evicted has not been used since then.
//
// Done always reaches the limiter that admitted, even if its key was evicted
// in between. The limiters made by newLimiter must not need closing. A Keyed
// is an io.Closer (a Guard closes it) only to stop its janitor. Make one with
// NewKeyed; the zero value is not usable.
type Keyed struct {
	newLimiter func(key string) (sluice.Policy, error)
	shards     []keyedShard
	mask       uint64
	seed       maphash.Seed
	digestSeed maphash.Seed // with seed, the digest of a long key (see held)
	ttl        time.Duration
	requireKey bool
	name       string
	clock      limiterClock
	needs      sluice.Needs // what the limiters newLimiter makes need of a Guard
	window     atomic.Int64 // the window of the limiters newLimiter makes; 0 if they have none

	setMu  sync.Mutex                                // serialises SetLimit
	update atomic.Pointer[func(sluice.Policy) error] // SetLimit's, applied to each new key's limiter

	closeOnce sync.Once
	stop      chan struct{}
	stopped   chan struct{}
}

// rateWindow returns the window of the limiters newLimiter makes, as the one it
// made for the empty key at construction reports it (0 when they report
// none): the w of the RateLimit-Policy header field.
func (k *Keyed) rateWindow() time.Duration { return time.Duration(k.window.Load()) }

// SetLimit changes the numbers of every key's limiter, those held and
// those to come, with update, which changes one limiter in place (with its
// SetLimit). update is tried first on a limiter newLimiter makes for the
// key "": when it fails there, SetLimit returns its error and changes
// nothing. It is then applied to every limiter held, and to every limiter
// newLimiter makes from then on before it decides, until the next
// SetLimit. update runs under a shard's lock: it must not call k. A
// change that would leave the limiters' window longer than the idle TTL
// (see WithIdleTTL) is refused, changing nothing.
func (k *Keyed) SetLimit(update func(sluice.Policy) error) error {
	defer policywindow.Changed() // once the new window is in place
	if update == nil {
		return errors.New("ratelimit: Keyed.SetLimit: nil update")
	}
	k.setMu.Lock()
	defer k.setMu.Unlock()
	probe, err := k.newLimiter("")
	if err == nil && isnil.Of(probe) {
		err = errors.New("nil policy")
	}
	if err != nil {
		return fmt.Errorf("ratelimit: Keyed.SetLimit: newLimiter: %w", err)
	}
	if err := update(probe); err != nil {
		return fmt.Errorf("ratelimit: Keyed.SetLimit: %w", err)
	}
	if probe.Needs() != k.needs {
		return errors.New("ratelimit: Keyed.SetLimit: the change alters what the limiters need of a Guard (whether they wait)")
	}
	window := policywindow.Of(probe)
	if err := ttlCovers(k.ttl, wholeAfter(probe)); err != nil {
		return fmt.Errorf("ratelimit: Keyed.SetLimit: %w", err)
	}
	k.update.Store(&update)
	k.window.Store(int64(window))
	// A key made meanwhile is inserted under its shard's lock after it
	// read the update: either the walk below finds it, or it read this one.
	var errs []error
	for i := range k.shards {
		s := &k.shards[i]
		s.mu.Lock()
		for key, e := range s.m {
			if err := update(e.lim); err != nil {
				errs = append(errs, fmt.Errorf("key %q: %w", key, err))
			}
		}
		s.mu.Unlock()
	}
	if len(errs) > 0 {
		return fmt.Errorf("ratelimit: Keyed.SetLimit: %w", errors.Join(errs...))
	}
	return nil
}

type keyedEntry struct {
	key        string
	lim        sluice.Policy
	last       time.Duration
	tick       uint64      // the shard's tick when e last moved to the front
	used       uint64      // the shard's count of uses when e was last used
	prev, next *keyedEntry // LRU list; prev is more recent
	// inflight counts the calls admitted through e whose Done has not come:
	// a key with one is in use, and is neither idle nor evicted (its next
	// request would start afresh beside the calls still running, two
	// calls of a key under a per-key bulkhead of 1).
	inflight atomic.Int32
}

// keyedCall carries an admitted call's entry and inner ticket to its Done.
// A Keyed's Ticket names its record: generation (24 bits) | shard (8 bits) |
// record index (32 bits). The record holds the entry itself, not its key, so
// the Done reaches the limiter that admitted even if the key was evicted or
// expired meanwhile; a shard keeps as many records as it has seen calls in
// flight at once, and reuses them.
//
// A record belongs to its call from reserve to Done, so its fields need no
// lock. Free records form a stack: Done pushes with compare-and-swap, without
// the shard's lock; reserve pops under the lock, so there is one popper at a
// time and the stack cannot suffer ABA.
type keyedCall struct {
	e     *keyedEntry
	inner sluice.Ticket
	gen   uint32 // 24 bits; a ticket with another gen is stale
	next  int32  // next free record, while free
}

type keyedShard struct {
	mu           sync.Mutex
	m            map[string]*keyedEntry
	head, tail   *keyedEntry // most and least recently used
	cap          int
	tick         uint64                                   // moves to the front so far
	uses         uint64                                   // uses of its keys so far
	promoteAfter uint64                                   // cap/4, at least 1
	chunks       atomic.Pointer[[]*[keyedChunk]keyedCall] // copied to grow; chunks never move
	ncalls       int32                                    // records made
	free         atomic.Int32                             // first free record, -1 when none
	gen          uint32
	_            [64]byte
}

const keyedChunk = 64

const (
	keyedGenBits   = 24
	keyedShardBits = 8
)

// NewKeyed returns a Keyed that makes each key's limiter with newLimiter
// (see the example). newLimiter is called once at construction with the key
// "" to check it, and then whenever a key without a limiter comes; it must
// return a new limiter each time. A newLimiter error at request time rejects that request, with
// a Cause wrapping both sluice.ErrRateLimited and the error, and a
// RetryAfter of 1s. A request's key is what the adapter's Keyer found
// (sluicehttp.WithKeyer, say) or sluice.WithKey put in its context; a
// request without one is limited under the key "", which every such
// request shares, unless RequireKey.
func NewKeyed(newLimiter func(key string) (sluice.Policy, error), opts ...Option) (*Keyed, error) {
	o := options{name: "ratelimit/keyed", maxKeys: defaultMaxKeys, clock: sluice.SystemClock}
	if err := applyOptions(&o, opts); err != nil {
		return nil, err
	}
	if newLimiter == nil {
		return nil, errors.New("ratelimit: NewKeyed: nil newLimiter")
	}
	if o.janitor > 0 && o.idleTTL == 0 {
		return nil, errors.New("ratelimit: NewKeyed: WithJanitor needs WithIdleTTL")
	}
	probe, err := newLimiter("")
	if err != nil {
		return nil, fmt.Errorf("ratelimit: NewKeyed: newLimiter: %w", err)
	} else if isnil.Of(probe) {
		return nil, errors.New("ratelimit: NewKeyed: newLimiter returned a nil policy")
	}
	needs := probe.Needs()
	window := policywindow.Of(probe)
	if err := ttlCovers(o.idleTTL, wholeAfter(probe)); err != nil {
		return nil, fmt.Errorf("ratelimit: NewKeyed: %w", err)
	}
	// A power of two, at most 64, leaving each shard at least 128 keys so that
	// uneven hashing hardly evicts before maxKeys keys are held.
	n := 1 << min(6, bits.Len(uint(max(o.maxKeys/128, 1)))-1)
	k := &Keyed{
		newLimiter: newLimiter, shards: make([]keyedShard, n), mask: uint64(n - 1),
		seed: maphash.MakeSeed(), digestSeed: maphash.MakeSeed(), ttl: o.idleTTL, requireKey: o.requireKey, name: o.name, clock: newLimiterClock(o.clock),
		needs: needs,
	}
	k.window.Store(int64(window))
	for i := range k.shards {
		s := &k.shards[i]
		s.m = make(map[string]*keyedEntry)
		s.setCap(o.maxKeys/n + min(1, max(0, o.maxKeys%n-i)))
		s.free.Store(-1)
	}
	if o.janitor > 0 {
		k.stop, k.stopped = make(chan struct{}), make(chan struct{})
		go k.janitor(o.janitor)
	}
	return k, nil
}

// SetMaxKeys changes the most keys k holds at once, as WithMaxKeys set
// it: keys past a lower cap are evicted now, least recently used first
// (but for those with a call in flight, which go once idle, when a new key
// needs room), and the keys held keep their limiters. The shards stay those made for
// the first cap (one for each 128 keys of it, up to 64), each holding its
// share of the new one: n must leave each at least one key.
func (k *Keyed) SetMaxKeys(n int) error {
	shards := len(k.shards)
	if n < shards {
		return fmt.Errorf("ratelimit: Keyed.SetMaxKeys(%d): want at least %d, one key for each shard made for the first cap", n, shards)
	}
	for i := range k.shards {
		s := &k.shards[i]
		s.mu.Lock()
		s.setCap(n/shards + min(1, max(0, n%shards-i)))
		s.mu.Unlock()
	}
	return nil
}

// Name returns the Keyed's name, "ratelimit/keyed" unless set with
// WithName. Its decisions carry this name, whichever key's limiter
// decided.
func (k *Keyed) Name() string { return k.name }

// Len returns the number of keys held.
func (k *Keyed) Len() int {
	n := 0
	for i := range k.shards {
		s := &k.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// Admit decides on the request with the limiter of its key
// (sluice.KeyFrom(ctx)) at instant now.
func (k *Keyed) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	e, c, si, slot, err := k.enter(ctx, now)
	if err != nil {
		d := k.refusal(err)
		return answer(&d, 0)
	}
	t, q, cause := e.lim.Admit(ctx, now)
	if cause != nil {
		k.shards[si].freeCall(slot)
		return 0, q, cause
	}
	// The record is this call's alone until its Done, which the caller orders
	// after this return; its chunk never moves.
	c.inner = t
	return keyedTicket(c, si, slot), q, nil
}

// Needs returns what the limiters newLimiter makes need, as the one it
// made for the empty key at construction declares: newLimiter must make
// limiters of one kind.
func (k *Keyed) Needs() sluice.Needs { return k.needs }

// errNoKey is enter's error for a request without a key that
// RequireKey turns away.
var errNoKey = errors.New("ratelimit: keyed: no key")

// enter finds the entry of the request's key, making it if needed, and
// reserves a call record for it in shard si. Its error is errNoKey or
// newLimiter's.
func (k *Keyed) enter(ctx context.Context, now time.Duration) (*keyedEntry, *keyedCall, int, int32, error) {
	key, ok := sluice.KeyFrom(ctx)
	if !ok && k.requireKey {
		return nil, nil, 0, -1, errNoKey
	}
	hk := k.held(key)
	si := int(maphash.String(k.seed, hk) & k.mask)
	e, c, slot, err := k.lookup(&k.shards[si], key, hk, now, true)
	return e, c, si, slot, err
}

// maxHeldKey is the longest key held as it is.
const maxHeldKey = 128

// held returns the form key is held under: itself, or, past maxHeldKey
// bytes, a digest of 17 bytes, so that the keys' memory is bounded by
// their number whatever a client sends (a header may be a megabyte long).
// The digest is 128 bits of two seeded hashes, which a client cannot aim
// without the seeds; a short key of the digests' form is digested too, so
// no key held as it is can be taken for a digest. Long keys cost an
// allocation.
func (k *Keyed) held(key string) string {
	if len(key) <= maxHeldKey && (len(key) != 17 || key[0] != 0xff) {
		return key
	}
	var d [17]byte
	d[0] = 0xff
	binary.LittleEndian.PutUint64(d[1:], maphash.String(k.seed, key))
	binary.LittleEndian.PutUint64(d[9:], maphash.String(k.digestSeed, key))
	return string(d[:])
}

// refusal returns the Decision rejecting a request for enter's error.
func (k *Keyed) refusal(err error) sluice.Decision {
	if err == errNoKey {
		return k.noKey()
	}
	return k.failed(err)
}

// keyedTicket names call record slot of shard si, taken by c.
func keyedTicket(c *keyedCall, si int, slot int32) sluice.Ticket {
	return sluice.Ticket(uint64(c.gen)<<(32+keyedShardBits) | uint64(si)<<32 | uint64(slot))
}

// Done passes the outcome on to the limiter that admitted the call.
func (k *Keyed) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	k.done(t, o, now, latency, false)
}

func init() {
	shedhook.CutShortWithin = func(p any, t uint64, o uint8, now, latency time.Duration) bool {
		k, ok := p.(*Keyed)
		if ok {
			k.done(sluice.Ticket(t), sluice.Outcome(o), now, latency, true)
		}
		return ok
	}
}

// done is Done; cut tells a call that a deadline ended, which the limiter
// that admitted it hears as such when it is a Shedder (see shedhook).
func (k *Keyed) done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration, cut bool) {
	si := int(uint64(t)>>32) & (1<<keyedShardBits - 1)
	slot := int32(uint32(t))
	gen := uint32(uint64(t) >> (32 + keyedShardBits))
	if si >= len(k.shards) {
		return
	}
	s := &k.shards[si]
	dir := s.chunks.Load()
	if dir == nil || slot < 0 || int(slot) >= len(*dir)*keyedChunk {
		return // not a ticket of this Keyed
	}
	c := &(*dir)[slot/keyedChunk][slot%keyedChunk]
	if c.gen != gen || c.e == nil {
		return // already done
	}
	e, inner := c.e, c.inner
	s.freeCall(slot)
	if cut && shedhook.Cut(e.lim, uint64(inner), uint8(o), now, latency) {
		return
	}
	e.lim.Done(inner, o, now, latency)
}

// Forget drops key's limiter, if held, so that its next request starts
// afresh (after a successful login, say), and reports whether it was held.
// Calls in flight still end on the old limiter.
func (k *Keyed) Forget(key string) bool {
	key = k.held(key)
	s := &k.shards[maphash.String(k.seed, key)&k.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[key]
	if e != nil {
		s.remove(e)
	}
	return e != nil
}

// expire drops every key that has been idle for the idle TTL at instant now,
// and returns how many it dropped; the janitor calls it. It walks every key,
// one shard at a time under that shard's lock. It does nothing without
// WithIdleTTL.
func (k *Keyed) expire(now time.Duration) int {
	if k.ttl <= 0 {
		return 0
	}
	n := 0
	for i := range k.shards {
		s := &k.shards[i]
		s.mu.Lock()
		for e := s.tail; e != nil; {
			prev := e.prev
			if k.expired(e, now) {
				s.remove(e)
				n++
			}
			e = prev
		}
		s.mu.Unlock()
	}
	return n
}

// Close stops the janitor, if one runs, and waits for it to end. Closing
// twice is harmless; the Keyed keeps deciding after Close.
func (k *Keyed) Close() error {
	k.closeOnce.Do(func() {
		if k.stop != nil {
			close(k.stop)
			<-k.stopped
		}
	})
	return nil
}

func (k *Keyed) janitor(interval time.Duration) {
	defer close(k.stopped)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			k.expire(k.clock.now())
		}
	}
}

func (k *Keyed) noKey() sluice.Decision {
	return sluice.Decision{Policy: k.name, Limit: -1, Cause: ErrNoKey}
}

func (k *Keyed) failed(err error) sluice.Decision {
	return sluice.Decision{Policy: k.name, Limit: -1, RetryAfter: time.Second,
		Cause: fmt.Errorf("%w: ratelimit: keyed: making the key's limiter: %w", sluice.ErrRateLimited, err)}
}

// ttlCovers returns an error when an idle TTL of ttl forgets a key before
// its limiter, whole again after whole, is; nil for no TTL.
func ttlCovers(ttl, whole time.Duration) error {
	if ttl > 0 && ttl < whole {
		return fmt.Errorf("an idle TTL of %v forgets a key before its limiter is whole again (%v): a key back after that would start afresh with quota it has not earned", ttl, whole)
	}
	return nil
}

// wholeAfter returns how long p, left idle, takes to be whole again: its
// window, or, for a Shaper, which has none to show clients, its longest
// queue and one turn.
func wholeAfter(p sluice.Policy) time.Duration {
	if s, ok := p.(interface{ wholeAfter() time.Duration }); ok {
		return s.wholeAfter()
	}
	return policywindow.Of(p)
}

func (k *Keyed) expired(e *keyedEntry, now time.Duration) bool {
	return k.ttl > 0 && now-e.last >= k.ttl && e.inflight.Load() == 0 && wholeAt(e.lim, now)
}

// wholeAt reports whether p, a key's limiter, is whole at now, as far as
// its window does not tell: a Shaper's queue, which a costly request makes
// longer than any TTL checked at construction, must have emptied.
func wholeAt(p sluice.Policy, now time.Duration) bool {
	if s, ok := p.(interface{ wholeAt(time.Duration) bool }); ok {
		return s.wholeAt(now)
	}
	return true
}

// lookup returns key's entry, held under hk (see held), making it if
// needed, marked as used at now; with call set it also reserves a call
// record for it, and returns the record and its index.
func (k *Keyed) lookup(s *keyedShard, key, hk string, now time.Duration, call bool) (*keyedEntry, *keyedCall, int32, error) {
	s.mu.Lock()
	if e := s.m[hk]; e != nil && !k.expired(e, now) {
		s.touch(e, now)
		c, slot := s.reserve(e, call)
		s.mu.Unlock()
		return e, c, slot, nil
	}
	s.mu.Unlock()

	lim, err := k.newLimiter(key)
	if err == nil && isnil.Of(lim) { // a nil *TokenBucket too
		err = errors.New("nil policy")
	}
	if err != nil {
		return nil, nil, -1, err
	}
	fresh := &keyedEntry{key: hk, lim: lim, last: now}

	s.mu.Lock()
	defer s.mu.Unlock()
	if u := k.update.Load(); u != nil {
		// Read under the lock, so SetLimit's walk of this shard either
		// comes after and finds the key, or came before and stored u.
		if err := (*u)(lim); err != nil {
			return nil, nil, -1, err
		}
	}
	if e := s.m[hk]; e != nil {
		if !k.expired(e, now) { // made by another request meanwhile
			s.touch(e, now)
			c, slot := s.reserve(e, call)
			return e, c, slot, nil
		}
		s.remove(e)
	}
	for i := 0; i < 2 && s.tail != nil && k.expired(s.tail, now); i++ {
		s.remove(s.tail)
	}
	s.makeRoom()
	s.m[hk] = fresh
	s.uses++
	fresh.used = s.uses
	s.pushFront(fresh)
	c, slot := s.reserve(fresh, call)
	return fresh, c, slot, nil
}

// makeRoom evicts keys of s until a new one fits under its cap, least
// recently used first, under s.mu. A key with a call in flight is in use
// whatever the list says: it moves to the front instead. When every key
// of s has one, the new key is held over the cap; the keys over it are
// then no more than the calls in flight, and go once idle.
func (s *keyedShard) makeRoom() {
	for seen := len(s.m); len(s.m) >= s.cap && seen > 0; seen-- {
		e := s.tail
		if e.inflight.Load() == 0 {
			s.remove(e)
			continue
		}
		s.unlink(e)
		s.pushFront(e)
	}
}

// setCap sets the most keys s holds to c, at least 1, evicting its least
// recently used keys past it, but for those with a call in flight (see
// makeRoom). s.mu is held, or s is not yet shared.
func (s *keyedShard) setCap(c int) {
	s.cap = c
	s.promoteAfter = uint64(max(1, s.cap/4))
	n := len(s.m) - s.cap
	if n <= 0 {
		return
	}
	// By when each was last used: the list's order is the use's only to
	// within a quarter of the old capacity (see touch), and a key in use
	// near the tail of a long list would go before idle ones past a new,
	// shorter one.
	es := make([]*keyedEntry, 0, len(s.m))
	for e := s.tail; e != nil; e = e.prev {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *keyedEntry) int { return cmp.Compare(a.used, b.used) })
	for _, e := range es {
		if n == 0 {
			break
		}
		if e.inflight.Load() == 0 {
			s.remove(e)
			n--
		}
	}
}

func (s *keyedShard) call(i int32) *keyedCall {
	return &(*s.chunks.Load())[i/keyedChunk][i%keyedChunk]
}

// reserve takes a call record for e when call is set; nil and -1 otherwise.
func (s *keyedShard) reserve(e *keyedEntry, call bool) (*keyedCall, int32) {
	if !call {
		return nil, -1
	}
	i := s.free.Load()
	for i >= 0 && !s.free.CompareAndSwap(i, s.call(i).next) {
		i = s.free.Load()
	}
	if i < 0 {
		i = s.ncalls
		var dir []*[keyedChunk]keyedCall
		if p := s.chunks.Load(); p != nil {
			dir = *p
		}
		if int(i/keyedChunk) == len(dir) {
			grown := append(dir[:len(dir):len(dir)], new([keyedChunk]keyedCall))
			s.chunks.Store(&grown)
		}
		s.ncalls++
	}
	if s.gen = (s.gen + 1) & (1<<keyedGenBits - 1); s.gen == 0 {
		s.gen = 1 // a zero ticket never names a call
	}
	c := s.call(i)
	*c = keyedCall{e: e, gen: s.gen, next: -1}
	e.inflight.Add(1)
	return c, i
}

// freeCall pushes record i on the free stack; it takes no lock.
func (s *keyedShard) freeCall(i int32) {
	c := s.call(i)
	c.e.inflight.Add(-1)
	c.e, c.inner = nil, 0
	for {
		h := s.free.Load()
		c.next = h
		if s.free.CompareAndSwap(h, i) {
			return
		}
	}
}

// touch marks e used at now. It moves e to the front of the list only when
// a quarter of the shard's capacity of other keys has been moved there since
// e was: a busy key then costs no writes to its neighbours, and the key
// evicted has not been used since a quarter of the list went past it.
func (s *keyedShard) touch(e *keyedEntry, now time.Duration) {
	e.last = max(e.last, now)
	s.uses++
	e.used = s.uses
	if s.tick-e.tick < s.promoteAfter {
		return
	}
	s.unlink(e)
	s.pushFront(e)
}

func (s *keyedShard) pushFront(e *keyedEntry) {
	s.tick++
	e.tick = s.tick
	e.prev, e.next = nil, s.head
	if s.head != nil {
		s.head.prev = e
	}
	s.head = e
	if s.tail == nil {
		s.tail = e
	}
}

func (s *keyedShard) unlink(e *keyedEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (s *keyedShard) remove(e *keyedEntry) {
	s.unlink(e)
	delete(s.m, e.key)
}

// limiterClock reads a Keyed's clock for its janitor, calling monoclock.Now
// directly, not through the interface, for SystemClock.
type limiterClock struct {
	c   sluice.Clock
	sys bool
}

func newLimiterClock(c sluice.Clock) limiterClock {
	return limiterClock{c: c, sys: c == sluice.SystemClock}
}

func (c limiterClock) now() time.Duration {
	if c.sys {
		return monoclock.Now()
	}
	return c.c.Now()
}
