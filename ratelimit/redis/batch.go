package redislimit

import (
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// batcher sends the scripts of concurrent decisions together. A decision that
// finds no call in flight sends its own script at once, alone; decisions that
// arrive meanwhile queue up, and when the call in flight returns, the first of
// them sends the whole queue as one pipeline (one write and one read for all
// of them, on the client and on the server) and wakes the others with their
// replies. Each script still runs atomically on its own; only the round trip
// is shared. No goroutine is started: the callers take turns.
type batcher struct {
	mu        sync.Mutex
	busy      bool
	queue     []*call
	spare     []*call
	pipelines atomic.Int64 // pipelines sent, for tests
}

// run sends c's script, alone or in a pipeline with concurrent ones, and
// returns its reply.
func (l *Limiter) run(c *call) (string, error) {
	b := &l.batch
	b.mu.Lock()
	if b.busy {
		b.queue = append(b.queue, c)
		b.mu.Unlock()
		<-c.done
		if !c.lead {
			return c.reply, c.err
		}
		c.lead = false
		l.sendQueue(c)
		return c.reply, c.err
	}
	b.busy = true
	b.mu.Unlock()
	c.reply, c.err = decideScript.Run(&c.ctx, l.client, c.keys, c.args...).Text()
	l.handOff()
	return c.reply, c.err
}

// sendQueue sends every queued call, leader's included, as one pipeline,
// wakes the others with their replies and hands the turn on.
func (l *Limiter) sendQueue(leader *call) {
	b := &l.batch
	b.mu.Lock()
	batch := b.queue
	b.queue, b.spare = b.spare[:0], nil
	b.mu.Unlock()
	if len(batch) == 1 {
		c := batch[0]
		c.reply, c.err = decideScript.Run(&c.ctx, l.client, c.keys, c.args...).Text()
	} else {
		l.pipeline(batch)
	}
	for i, c := range batch {
		batch[i] = nil
		if c != leader {
			c.done <- struct{}{}
		}
	}
	b.mu.Lock()
	b.spare = batch[:0]
	b.mu.Unlock()
	l.handOff()
}

// handOff gives the turn to the first queued call, or ends the busy spell.
func (l *Limiter) handOff() {
	b := &l.batch
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.busy = false
		b.mu.Unlock()
		return
	}
	next := b.queue[0]
	b.mu.Unlock()
	next.lead = true
	next.done <- struct{}{}
}

// pipeline sends batch's scripts in one pipeline, under the earliest
// deadline among them (the first queued). A script the server no longer has
// (NOSCRIPT) is sent again on its own, which loads it.
func (l *Limiter) pipeline(batch []*call) {
	l.batch.pipelines.Add(1)
	ctx := &batch[0].ctx
	pipe := l.client.Pipeline()
	for _, c := range batch {
		c.cmd = decideScript.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, c := range batch {
		c.reply, c.err = c.cmd.Text()
		c.cmd = nil
		if c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT") {
			c.reply, c.err = decideScript.Run(&c.ctx, l.client, c.keys, c.args...).Text()
		}
	}
}
