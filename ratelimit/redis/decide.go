package redislimit

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// call is the per-request scratch of one decision, pooled: the keys and
// arguments of the script, and what Done needs to give quota back.
type call struct {
	ctx      callCtx
	keys     []string
	args     []any
	tags     []uint64
	local    []localTicket
	ds       []sluice.Decision
	marks    []int64 // per limit: the admission's mark in Redis, for a refund (see decideSrc)
	viaRedis bool
	// pick is the limit a never-satisfiable request exceeds, whose numbers
	// its rejection reports; -1 for another request.
	pick int
	// negGen is, per limit, the negative cache's generation of its key
	// when Redis was asked.
	negGen []uint64
}

type localTicket struct {
	p  sluice.Policy
	tk sluice.Ticket
}

// Script modes, pre-boxed.
var (
	modeAdmit  any = "a"
	modeRefund any = "r"
	zeroArg    any = "0"
)

// Admit decides on one request at the monotonic instant now: its key from the
// context (sluice.KeyFrom unless WithKeyFunc), its cost sluice.CostFrom(ctx).
// It makes one round trip to Redis, bounded by the limiter's timeout (not by
// ctx's deadline: a decision is owed either way), unless the negative cache
// or the open breaker answers first.
//
// Every Admit that allows must be followed by exactly one Done with its
// Ticket, as a Guard does: outside one, run the call through a Guard of
// this limiter alone.
func (l *Limiter) Admit(ctx context.Context, now time.Duration) (sluice.Ticket, sluice.Quota, error) {
	d, t := l.admit(ctx, now)
	if !d.Allowed {
		return 0, sluice.Quota{Limit: d.Limit, Remaining: d.Remaining, Reset: d.Reset, RetryAfter: d.RetryAfter}, d.Cause
	}
	return t, sluice.Quota{Limit: d.Limit, Remaining: d.Remaining, Reset: d.Reset}, nil
}

// Needs returns sluice.NeedsResource: a limit WithPerResource counts by
// the call's resource, and a key function may read it. The limiter
// neither waits in Admit beyond its Redis call's timeout nor needs the end
// of a call.
func (l *Limiter) Needs() sluice.Needs { return sluice.NeedsResource }

// Done gives back, on sluice.Released, the quota that Admit took: one more
// round trip to Redis (skipped while the breaker is open), or the local
// limiter's refund when the failure policy decided. Other outcomes only end
// the ticket.
func (l *Limiter) Done(t sluice.Ticket, o sluice.Outcome, now, latency time.Duration) {
	if t == 0 {
		return
	}
	l.pendMu.Lock()
	c := l.pending[t]
	delete(l.pending, t)
	l.pendMu.Unlock()
	if c == nil {
		return
	}
	if c.viaRedis {
		if o == sluice.Released {
			l.refund(c, now)
			if l.neg != nil {
				// The quota given back may be what a remembered
				// rejection was turned away for: Redis decides again.
				// After the refund, and counted, so that a rejection
				// Redis gave before it is not remembered after.
				for _, k := range c.keys {
					l.neg.forget(k)
				}
			}
		}
	} else {
		for i := range c.local {
			if lt := c.local[i]; lt.p != nil {
				lt.p.Done(lt.tk, o, now, latency)
			}
		}
	}
	l.putCall(c)
}

func (l *Limiter) getCall() *call { return l.calls.Get().(*call) }

func (l *Limiter) putCall(c *call) {
	for i := range c.keys {
		c.keys[i] = ""
		c.local[i] = localTicket{}
		c.ds[i] = sluice.Decision{}
	}
	c.viaRedis = false
	l.calls.Put(c)
}

func (l *Limiter) track(c *call) sluice.Ticket {
	l.pendMu.Lock()
	l.nextID++
	if l.nextID == 0 {
		l.nextID++
	}
	t := l.nextID
	l.pending[t] = c
	l.pendMu.Unlock()
	return t
}

func (l *Limiter) admit(ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	cost := sluice.CostFrom(ctx)
	i := l.beyond(cost)
	if i < 0 {
		return l.ask(ctx, now, cost, -1)
	}
	// Never satisfiable, yet asked all the same, for the quota it leaves of
	// the limit it exceeds (which the scripts reject the request against),
	// as the local twin answers it: not a Remaining of 0.
	d, t := l.ask(ctx, now, cost, i)
	if t != 0 {
		if l.beyond(cost) < 0 { // a limit made larger meanwhile
			return d, t
		}
		l.Done(t, sluice.Released, now, 0) // admitted failing open
	}
	if d.Policy != l.name {
		// No answer from Redis (a failure policy's): the quota is all
		// there is to tell.
		d = sluice.Decision{Policy: l.name, Limit: l.limits[i].nums.Load().quota}
	}
	d.Allowed, d.Cause, d.RetryAfter = false, ratelimit.ErrNeverSatisfiable, 0
	return d, 0
}

// beyond returns the index of the first of l's limits whose quota cost
// exceeds; -1 when none.
func (l *Limiter) beyond(cost int64) int {
	for i, m := range l.limits {
		if cost > m.nums.Load().quota {
			return i
		}
	}
	return -1
}

// ask decides a request of cost at now with Redis, as admit describes; for
// a never-satisfiable request, pick is the limit it exceeds (else -1),
// whose numbers its rejection reports.
func (l *Limiter) ask(ctx context.Context, now time.Duration, cost int64, pick int) (sluice.Decision, sluice.Ticket) {
	c := l.getCall()
	c.pick = pick
	same := true
	for i, m := range l.limits {
		c.keys[i], c.tags[i] = m.key(ctx)
		if c.tags[i] != c.tags[0] {
			same = false
		}
	}
	if l.neg != nil {
		for i, k := range c.keys {
			c.negGen[i] = l.neg.generation(k)
		}
	}
	if l.neg != nil && pick < 0 {
		// The longest wait of the limits that remembered a rejection, as
		// Redis would answer it.
		var best sluice.Decision
		hit := false
		for i, k := range c.keys {
			if d, ok := l.neg.get(k, now, l.limits[i].nums.Load()); ok && (!hit || d.RetryAfter > best.RetryAfter) {
				best, hit = d, true
			}
		}
		if hit {
			l.putCall(c)
			return best, 0
		}
	}
	if !same && l.cluster {
		if l.observer != nil {
			l.observer(Event{src: l, Kind: EventRedisError, Policy: l.name, At: now, Err: ErrCrossSlot})
		}
		return l.fallback(ctx, c, now)
	}
	// The arguments of decideScript, which a refund runs.
	c.args[0] = modeAdmit
	boxed := any(cost)
	for i, m := range l.limits {
		j := 1 + 5*i
		n := m.nums.Load()
		c.args[j], c.args[j+1], c.args[j+2], c.args[j+3], c.args[j+4] = m.algArg, n.periodArg, n.quotaArg, boxed, zeroArg
	}
	if l.lanes != nil {
		return l.admitCoalesced(ctx, c, cost, now)
	}
	bt, ok := l.br.acquire(now)
	if !ok {
		return l.fallback(ctx, c, now)
	}
	ep := l.deadlines.get()
	c.ctx = callCtx{parent: ctx, ep: ep}
	script, args := decideScript, c.args
	if len(l.limits) == 1 { // its own script takes the period, quota and cost
		script, args = l.limits[0].single, c.args[2:5]
	}
	reply, err := l.run(bt, now, ep, &c.ctx, script, c.keys, args).Text()
	c.ctx = callCtx{}
	if err == nil {
		err = parseReply(reply, c.ds, c.marks)
	}
	if err != nil {
		failedAt := failedAt(now, ep)
		l.br.failure(bt, failedAt)
		return l.failed(ctx, c, now, failedAt, err)
	}
	l.br.success(bt, now)
	return l.decided(c, cost, now)
}

// run sends script to Redis with the context ctx of a call that began in
// epoch ep, holding the breaker ticket bt, and returns its command. A panic
// in the call (a go-redis hook's) ends bt as Ignored before it goes on, so
// that a half-open breaker's probe is not held for ever.
func (l *Limiter) run(bt sluice.Ticket, now time.Duration, ep *deadlineEpoch, ctx *callCtx, script *script, keys []string, args []any) *redis.Cmd {
	returned := false
	defer func() {
		if !returned {
			l.br.ignore(bt, failedAt(now, ep))
		}
	}()
	cmd := script.Run(ctx, l.client, keys, args...)
	returned = true
	return cmd
}

// failedAt is when a call that began in epoch ep, for a request admitted at
// now, failed: up to the timeout after now, on the Guard's clock. The clock
// is read only here, from the start of the call's deadline epoch, at most a
// grain before the call.
func failedAt(now time.Duration, ep *deadlineEpoch) time.Duration {
	return now + time.Since(ep.start)
}

// failed decides a request whose call to Redis failed at failedAt, by the
// failure policies. They still decide at now, the instant the request was
// admitted at: a local limiter must see the instants of its Guard's clock,
// not ones moved on by the wait for Redis.
func (l *Limiter) failed(ctx context.Context, c *call, now, failedAt time.Duration, err error) (sluice.Decision, sluice.Ticket) {
	l.topo.failed(err)
	if l.observer != nil {
		l.observer(Event{src: l, Kind: EventRedisError, Policy: l.name, At: failedAt, Err: err})
	}
	return l.fallback(ctx, c, now)
}

// decided turns the limits' decisions in c.ds, as Redis answered them, into
// the request's.
func (l *Limiter) decided(c *call, cost int64, now time.Duration) (sluice.Decision, sluice.Ticket) {
	d := l.compose(c.ds)
	if c.pick >= 0 && !d.Allowed {
		d = c.ds[c.pick] // the limit the cost exceeds
		d.Policy = l.name
	}
	if !d.Allowed {
		// Only a rejection of cost 1 is remembered: its RetryAfter holds for
		// every cost, while a costly request's would turn away cheap ones
		// that fit. Each key keeps its own limit's rejection, not the
		// request's, which may be another limit's longer one.
		if l.neg != nil && cost == 1 {
			for i := range c.ds {
				if di := c.ds[i]; !di.Allowed && di.RetryAfter > 0 {
					di.Policy, di.Cause = l.name, sluice.ErrRateLimited
					j := 1 + 5*i // the numbers the script was given
					l.neg.put(c.keys[i], now, di, c.args[j+1], c.args[j+2], c.negGen[i])
				}
			}
		}
		l.putCall(c)
		return d, 0
	}
	c.viaRedis = true
	return d, l.track(c)
}

// compose turns the limits' decisions into the request's: the rejection with
// the longest RetryAfter, or, when all admit, the one with the least
// Remaining.
func (l *Limiter) compose(ds []sluice.Decision) sluice.Decision {
	best := -1
	for i := range ds {
		ds[i].Limit = l.limits[i].nums.Load().quota
		if !ds[i].Allowed {
			if best < 0 || ds[best].Allowed || ds[i].RetryAfter > ds[best].RetryAfter {
				best = i
			}
			continue
		}
		if best < 0 || (ds[best].Allowed && ds[i].Remaining < ds[best].Remaining) {
			best = i
		}
	}
	d := ds[best]
	d.Policy = l.name
	if !d.Allowed {
		// All or nothing: a limit that would have admitted was not charged.
		d.Cause = sluice.ErrRateLimited
		if d.RetryAfter <= 0 {
			d.RetryAfter = time.Microsecond
		}
	}
	return d
}

// fallback decides by the limits' failure policies, in order, stopping at
// the first rejection and giving back what the local limiters before it took.
func (l *Limiter) fallback(ctx context.Context, c *call, now time.Duration) (sluice.Decision, sluice.Ticket) {
	var d sluice.Decision
	anyLocal := false
	for i, m := range l.limits {
		var di sluice.Decision
		switch m.failure {
		case failOpen:
			di = sluice.Decision{Allowed: true, Policy: m.openName, Limit: -1}
		case failClosed:
			di = sluice.Decision{Policy: m.closedName, Limit: -1, Cause: ErrUnavailable,
				RetryAfter: l.br.openLeft(now)}
		default:
			p, err := m.local.Load().get(c.keys[i])
			if err != nil { // validated at construction: cannot happen
				di = sluice.Decision{Allowed: true, Policy: m.openName, Limit: -1}
				break
			}
			t, q, cause := p.Admit(ctx, now)
			if cause == ratelimit.ErrNeverSatisfiable {
				// More than the local share, but within the limit (a cost
				// past it is refused before): Redis may admit it once it
				// answers again, so no "never".
				cause, q.RetryAfter = sluice.ErrRateLimited, l.br.openLeft(now)
			}
			di = sluice.Decision{Allowed: cause == nil, Policy: p.Name(), Limit: q.Limit,
				Remaining: q.Remaining, Reset: q.Reset, RetryAfter: q.RetryAfter, Cause: cause}
			if di.Allowed {
				c.local[i] = localTicket{p, t}
				anyLocal = true
			}
		}
		if !di.Allowed {
			for j := range i {
				if lt := c.local[j]; lt.p != nil {
					lt.p.Done(lt.tk, sluice.Released, now, 0)
				}
			}
			d = di
			anyLocal = false
			break
		}
		if i == 0 || (d.Limit == -1 && di.Limit != -1) || (di.Limit != -1 && di.Remaining < d.Remaining) {
			d = di
		}
	}
	if l.observer != nil {
		l.observer(Event{src: l, Kind: EventFallback, Policy: l.name, At: now, Decision: d})
	}
	if !anyLocal {
		l.putCall(c)
		return d, 0
	}
	return d, l.track(c)
}

// refund gives back in Redis what c's admission took, as far as it is still
// there; the script measures the time since on Redis's clock, from the
// admission's mark.
func (l *Limiter) refund(c *call, now time.Duration) {
	bt, ok := l.br.acquire(now)
	if !ok {
		return
	}
	c.args[0] = modeRefund
	for i := range l.limits {
		c.args[5+5*i] = any(c.marks[i])
	}
	ep := l.deadlines.get()
	c.ctx = callCtx{parent: context.Background(), ep: ep}
	err := l.run(bt, now, ep, &c.ctx, decideScript, c.keys, c.args).Err()
	c.ctx = callCtx{}
	if err != nil {
		now = failedAt(now, ep)
		l.br.failure(bt, now)
		l.topo.failed(err)
		if l.observer != nil {
			l.observer(Event{src: l, Kind: EventRedisError, Policy: l.name, At: now, Err: err})
		}
		return
	}
	l.br.success(bt, now)
}

var errReply = errors.New("redislimit: malformed script reply")

// micros converts the script's microseconds to a Duration, saturating instead
// of overflowing, and never below 0.
func micros(us int64) time.Duration {
	const maxMicros = int64(math.MaxInt64 / int64(time.Microsecond))
	switch {
	case us <= 0:
		return 0
	case us > maxMicros:
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(us) * time.Microsecond
}

// parseReply reads five integers per limit from the script's reply, the
// Decision's four and the admission's mark, which goes to marks. A reply
// that holds anything else (a number out of int64's range, one run into
// other text, more numbers than the limits') is malformed.
func parseReply(s string, ds []sluice.Decision, marks []int64) error {
	r := replyReader{s: s}
	for i := range ds {
		var ok bool
		if ds[i], marks[i], ok = r.decision(); !ok {
			return errReply
		}
	}
	if !r.end() {
		return errReply
	}
	return nil
}

// replyReader reads the integers of a script's reply in turn.
type replyReader struct {
	s   string
	pos int
}

// next reads the next integer.
func (r *replyReader) next() (int64, bool) {
	s, pos := r.s, r.pos
	for pos < len(s) && s[pos] == ' ' {
		pos++
	}
	start := pos
	neg := pos < len(s) && s[pos] == '-'
	if neg {
		pos++
	}
	digits := pos
	var v int64
	for pos < len(s) && s[pos] >= '0' && s[pos] <= '9' {
		v = v*10 + int64(s[pos]-'0')
		pos++
	}
	r.pos = pos
	switch {
	case pos == digits || (pos < len(s) && s[pos] != ' '):
		return 0, false // no digits, or a number run into other text
	case pos-digits > 18:
		// Up to 18 digits cannot overflow; longer ones are read with
		// their range checked.
		n, err := strconv.ParseInt(s[start:pos], 10, 64)
		return n, err == nil
	case neg:
		return -v, true
	}
	return v, true
}

// decision reads one limit's five integers: the Decision and the mark.
func (r *replyReader) decision() (sluice.Decision, int64, bool) {
	a, ok1 := r.next()
	rem, ok2 := r.next()
	reset, ok3 := r.next()
	retry, ok4 := r.next()
	w, ok5 := r.next()
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return sluice.Decision{}, 0, false
	}
	d := sluice.Decision{Allowed: a == 1, Remaining: max(rem, 0), Reset: micros(reset)}
	if !d.Allowed {
		d.RetryAfter = max(micros(retry), time.Microsecond)
		d.Cause = sluice.ErrRateLimited
	}
	return d, w, true
}

// end reports whether nothing but spaces is left.
func (r *replyReader) end() bool {
	for r.pos < len(r.s) && r.s[r.pos] == ' ' {
		r.pos++
	}
	return r.pos == len(r.s)
}
