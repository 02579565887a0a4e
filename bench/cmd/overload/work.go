package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// The services the scenarios guard. Each is a func(ctx) error that the
// libraries wrap; none of them knows which library wraps it.

// burnChunks is how many chunks a CPU-bound request burns; with chunks of
// half a millisecond that is about 4 ms of CPU.
const burnChunks = 8

var sink atomic.Uint64

// spin does n rounds of xorshift: CPU work that touches no memory.
func spin(n int) {
	x := uint64(88172645463325252)
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	sink.Add(x)
}

// calibrate finds how many rounds of spin take half a millisecond of CPU.
// It counts the CPU time the process used, not the time that passed, so
// that other processes on the machine do not shrink the work; the best of a
// few tries.
func calibrate() int {
	const rounds = 1 << 22
	best := time.Duration(1 << 62)
	for range 5 {
		start := processCPU()
		spin(rounds)
		if d := processCPU() - start; d > 0 && d < best {
			best = d
		}
	}
	if best == 1<<62 { // no CPU clock: about half a millisecond on a 2020s x86 core
		return 200_000
	}
	n := int(float64(rounds) * float64(500*time.Microsecond) / float64(best))
	return max(n, 1)
}

// cpuWork burns burnChunks chunks of CPU, giving up between chunks once the
// request's client has gone.
func cpuWork(perChunk int) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		for range burnChunks {
			if err := ctx.Err(); err != nil {
				return err
			}
			spin(perChunk)
		}
		return nil
	}
}

// pool is a downstream with a fixed number of connections: a call holds one
// while it waits for the answer.
type pool struct {
	conns chan struct{}
}

func newPool(n int) *pool { return &pool{conns: make(chan struct{}, n)} }

// hold takes a connection, waits d on it (or until ctx ends) and gives it
// back.
func (p *pool) hold(ctx context.Context, d time.Duration) error {
	select {
	case p.conns <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.conns }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// poolConns and poolHold make the pool-bound service: capacity is
// poolConns / poolHold = 800 requests/s.
const (
	poolConns = 16
	poolHold  = 20 * time.Millisecond
)

func poolWork(p *pool) func(ctx context.Context) error {
	return func(ctx context.Context) error { return p.hold(ctx, poolHold) }
}

// errDependency is the sick dependency's failure.
var errDependency = errors.New("dependency failed")

// dependency is the slow-dependency scenario's downstream: 16 connections,
// 20 ms an answer; sick, a quarter of the calls fail after 20 ms and the rest
// take 2 s.
type dependency struct {
	pool *pool
	sick atomic.Bool
	// sickCalls counts the calls sent while sick.
	sickCalls atomic.Int64

	mu        sync.Mutex
	sickAt    time.Time
	firstOpen time.Duration // -1 until a breaker refuses a call while sick
	rnd       *rand.Rand
}

const (
	depHealthy  = 20 * time.Millisecond
	depSick     = 2 * time.Second
	depSickFail = 0.25
)

func newDependency() *dependency {
	return &dependency{pool: newPool(poolConns), firstOpen: -1, rnd: rand.New(rand.NewPCG(7, 7))}
}

func (d *dependency) setSick(on bool) {
	d.mu.Lock()
	if on {
		d.sickAt = time.Now()
		d.firstOpen = -1
		d.sickCalls.Store(0)
	}
	d.sick.Store(on)
	d.mu.Unlock()
}

// refused notes that a breaker refused a call.
func (d *dependency) refused() {
	if !d.sick.Load() {
		return
	}
	d.mu.Lock()
	if d.firstOpen < 0 {
		d.firstOpen = time.Since(d.sickAt)
	}
	d.mu.Unlock()
}

func (d *dependency) call(ctx context.Context) error {
	if !d.sick.Load() {
		return d.pool.hold(ctx, depHealthy)
	}
	d.sickCalls.Add(1)
	d.mu.Lock()
	fail := d.rnd.Float64() < depSickFail
	d.mu.Unlock()
	if fail {
		if err := d.pool.hold(ctx, depHealthy); err != nil {
			return err
		}
		return errDependency
	}
	return d.pool.hold(ctx, depSick)
}
