package redislimit

import (
	"sync"

	"github.com/redis/go-redis/v9"
)

// batcher sends the decisions of concurrent requests to Redis together. A
// request that finds no round trip of its limiter in flight sends its own at
// once, so a lone caller waits for nothing. One that finds a round trip in
// flight queues; when that round trip ends, the requests queued meanwhile go
// in one pipeline, sent by the first of them. Under load Redis then reads and
// answers many decisions per system call instead of one, which is where a
// busy server spends most of its time; each decision is still its own script
// call, with its own answer.
//
// A queued request's round trip runs under the deadline of the earliest
// request of its batch, so no request waits past its own timeout.
type batcher struct {
	mu    sync.Mutex
	busy  bool    // a round trip is in flight
	queue []*call // the requests waiting for the next round trip
	spare []*call // the slice of an answered batch, for the next queue
}

// exec runs c's script call, alone or in a batch, and leaves its reply in
// c.reply and c.err.
func (l *Limiter) exec(c *call) {
	b := &l.batch
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		l.roundTrip1(c)
		l.handOff(nil)
		return
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	<-c.wake
	batch := c.batch
	if batch == nil {
		return // a batch c was in has answered
	}
	c.batch = nil
	l.roundTrip(batch)
	for _, o := range batch[1:] {
		o.wake <- struct{}{}
	}
	l.handOff(batch)
}

// handOff ends a round trip: the requests queued meanwhile become the next
// batch, sent by the first of them, or the limiter has none in flight. sent
// is the batch just answered, if it was one; its slice is kept for reuse.
func (l *Limiter) handOff(sent []*call) {
	b := &l.batch
	b.mu.Lock()
	if sent != nil {
		clear(sent)
		b.spare = sent[:0]
	}
	if len(b.queue) == 0 {
		b.busy = false
		b.mu.Unlock()
		return
	}
	next := b.queue
	b.queue, b.spare = b.spare, nil
	b.mu.Unlock()
	next[0].batch = next
	next[0].wake <- struct{}{}
}

// roundTrip1 runs one call's script.
func (l *Limiter) roundTrip1(c *call) {
	script, args := l.script(c)
	c.reply, c.err = script.Run(&c.ctx, l.client, c.keys, args...).Text()
}

// roundTrip runs the script calls of batch: one call directly, more in one
// pipeline. A call that the server answers NOSCRIPT (after a restart or
// SCRIPT FLUSH) runs again alone, loading the script.
func (l *Limiter) roundTrip(batch []*call) {
	if len(batch) == 1 {
		l.roundTrip1(batch[0])
		return
	}
	ctx := &batch[0].ctx // the earliest deadline of the batch
	pipe := l.client.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, c := range batch {
		script, args := l.script(c)
		cmds[i] = script.EvalSha(ctx, pipe, c.keys, args...)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range batch {
		c.reply, c.err = cmds[i].Text()
		if c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT") {
			script, args := l.script(c)
			c.reply, c.err = script.Run(ctx, l.client, c.keys, args...).Text()
		}
	}
}

// script returns the script and arguments of c's admission.
func (l *Limiter) script(c *call) (*redis.Script, []any) {
	if len(l.limits) == 1 {
		return l.limits[0].single, c.args[2:5]
	}
	return decideScript, c.args
}
