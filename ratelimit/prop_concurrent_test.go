package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
)

// TestPropertyTokenBucketReconfigured drives a TokenBucket through random
// admissions, releases, rate and burst changes (SetLimit), the clock going forward,
// and checks over every interval that it admits no more than the tokens it
// held at the start, the burst it gained, the refill at the rates in force
// and what was given back; and that a burst change keeps the tokens missing,
// SetRateAt the tokens held (rounded towards fewer).
func TestPropertyTokenBucketReconfigured(t *testing.T) {
	type adm struct {
		seq   int
		at    time.Duration
		n     int64
		burst int64 // in force when admitted
	}
	type change struct {
		seq   int
		at    time.Duration
		iv    int64 // in force from at on
		gain  int64 // burst gained
		burst int64
	}
	rates := []Rate{PerSecond(10), PerSecond(3), PerSecond(7), Rate{Count: 100, Period: time.Minute}, Every(time.Millisecond)}
	bursts := []int64{1, 2, 5, 10, 40}
	propSeeds(t, propBudget(t), func(seed uint64) {
		r := rand.New(rand.NewPCG(seed, 0x5eed))
		rt, burst := rates[r.IntN(len(rates))], bursts[r.IntN(len(bursts))]
		tb, err := NewTokenBucket(rt, burst)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Duration(r.Int64N(1e12))
		changes := []change{{at: now, iv: interval(rt), burst: burst}}
		var adms []adm
		type held struct {
			tk  sluice.Ticket
			at  time.Duration
			adm int
		}
		var out []held
		refunds := map[int]int64{} // seq → tokens given back at most
		seq := 0
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d %v burst %d: %s", seed, rt, burst, fmt.Sprintf(format, args...))
		}
		for range 300 {
			switch op := r.IntN(20); {
			case op < 6:
				now += time.Duration(r.Int64N(int64(rt.Period) / 2))
			case op < 13:
				n := 1 + r.Int64N(tb.Burst()+1)
				ctx := sluice.WithCost(context.Background(), n)
				d, tk := admit(tb, ctx, now)
				if d.Allowed != (n <= tb.Burst() && d.Cause == nil) || d.Remaining < 0 || d.Remaining > d.Limit || d.Limit != tb.Burst() {
					fail("at %v n=%d: %+v", now, n, d)
				}
				if d.Allowed {
					seq++
					adms = append(adms, adm{seq: seq, at: now, n: n, burst: tb.Burst()})
					out = append(out, held{tk, now, len(adms) - 1})
				}
			case op < 16:
				if len(out) == 0 {
					continue
				}
				k := r.IntN(len(out))
				h := out[k]
				out = append(out[:k], out[k+1:]...)
				o := []sluice.Outcome{sluice.Success, sluice.Released}[r.IntN(2)]
				tb.Done(h.tk, o, now, now-h.at)
				if o == sluice.Released {
					seq++
					refunds[seq] = adms[h.adm].n
				}
			case op < 18:
				before := tb.TokensAt(now)
				nr := rates[r.IntN(len(rates))]
				if err := tb.setRateAt(now, nr); err != nil {
					fail("SetRateAt(%v): %v", nr, err)
				}
				after := tb.TokensAt(now)
				if after > before+1e-9 || after < before-1-1e-9 {
					fail("SetRateAt(%v) at %v: tokens %v, then %v", nr, now, before, after)
				}
				seq++
				changes = append(changes, change{seq: seq, at: now, iv: interval(nr), burst: tb.Burst()})
			default:
				before, old := tb.TokensAt(now), tb.Burst()
				nb := bursts[r.IntN(len(bursts))]
				if err := tb.setBurstAt(now, nb); err != nil {
					fail("SetBurstAt(%d): %v", nb, err)
				}
				after := tb.TokensAt(now)
				if d := (float64(nb) - after) - (float64(old) - before); d > 1e-9 || d < -1e-9 {
					fail("SetBurstAt(%d) at %v: %v of %d tokens, then %v of %d", nb, now, before, old, after, nb)
				}
				seq++
				changes = append(changes, change{seq: seq, at: now, iv: changes[len(changes)-1].iv, gain: max(nb-old, 0), burst: nb})
			}
		}
		// refill returns the tokens the rates in force add over [from, to].
		refill := func(from, to time.Duration) float64 {
			var sum float64
			for i, c := range changes {
				end := to
				if i+1 < len(changes) {
					end = min(end, changes[i+1].at)
				}
				if start := max(from, c.at); end > start {
					sum += float64(end-start) / float64(c.iv)
				}
			}
			return sum
		}
		for i := range adms {
			var sum, gained, given int64
			for j := i; j < len(adms); j++ {
				sum += adms[j].n
				for _, c := range changes {
					if c.seq > adms[j-min(j-i, 1)].seq && c.seq < adms[j].seq && j > i {
						gained += c.gain
					}
				}
				for s, n := range refunds {
					if s > adms[j-min(j-i, 1)].seq && s < adms[j].seq && j > i {
						given += n
					}
				}
				allowance := float64(adms[i].burst+gained+given) + refill(adms[i].at, adms[j].at)
				if float64(sum) > allowance+1e-6 {
					fail("admitted %d over [%v, %v]; allowance %v (%d gained, %d given back)", sum, adms[i].at, adms[j].at, allowance, gained, given)
				}
			}
		}
	})
}

// TestPropertyTokenBucketWaitN runs waiters, some with deadlines, some
// cancelled, against a TokenBucket inside a synctest bubble, and checks that
// the tokens taken by the waits that returned nil never exceed the burst
// and the refill between any two of them, and that a wait refused at once
// was indeed refused at once.
func TestPropertyTokenBucketWaitN(t *testing.T) {
	for seed := range uint64(20) {
		synctest.Test(t, func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0x5eed))
			start := time.Now()
			clk := bubbleClock{start}
			burst := int64(1 + r.IntN(5))
			tb, err := NewTokenBucket(PerSecond(10), burst, WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			type got struct {
				at time.Duration
				n  int64
			}
			var taken []got
			var wg sync.WaitGroup
			for w := range 8 {
				seeds := [2]uint64{seed, uint64(w)}
				wg.Go(func() {
					r := rand.New(rand.NewPCG(seeds[0], seeds[1]))
					for range 15 {
						time.Sleep(time.Duration(r.IntN(300)) * time.Millisecond)
						n := 1 + r.Int64N(burst+1)
						ctx, cancel := context.WithCancel(context.Background())
						switch r.IntN(3) {
						case 0:
							ctx, cancel = context.WithTimeout(context.Background(), time.Duration(r.IntN(800))*time.Millisecond)
						case 1:
							d := time.Duration(r.IntN(500)) * time.Millisecond
							wg.Go(func() { time.Sleep(d); cancel() })
						}
						before := clk.Now()
						err := tb.WaitN(ctx, n)
						after := clk.Now()
						cancel()
						_, rejected := sluice.RejectionOf(err)
						switch {
						case err == nil:
							mu.Lock()
							taken = append(taken, got{after, n})
							mu.Unlock()
						case rejected:
							if after != before {
								t.Errorf("seed %d: a refusal waited %v", seeds[0], after-before)
							}
							if n <= burst && !errors.Is(err, ErrWouldExceedDeadline) {
								t.Errorf("seed %d: refused %d of %d: %v", seeds[0], n, burst, err)
							}
						case !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
							t.Errorf("seed %d: %v", seeds[0], err)
						}
					}
				})
			}
			wg.Wait()
			iv := int64(100 * time.Millisecond)
			for i := range taken {
				for j := range taken {
					if taken[j].at < taken[i].at {
						continue
					}
					var sum int64
					for _, g := range taken {
						if g.at >= taken[i].at && g.at <= taken[j].at {
							sum += g.n
						}
					}
					// Cancelled waits give back at most their own tokens, so
					// only those count against the bound: there are none here
					// to add, the refill and burst must cover the rest.
					if sum*iv > burst*iv+int64(taken[j].at-taken[i].at) {
						t.Fatalf("seed %d: %d tokens taken in [%v, %v], burst %d at 10/s", seed, sum, taken[i].at, taken[j].at, burst)
					}
				}
			}
		})
	}
}

type bubbleClock struct{ start time.Time }

func (c bubbleClock) Now() time.Duration { return time.Since(c.start) }

// concurrentBound runs workers that admit, release and (for a TokenBucket)
// reserve and cancel at instants read from a shared clock, which they move
// forward, and checks at the end that everything admitted, less everything
// given back, fits the burst and the refill between the earliest and the
// latest instant.
func concurrentBound(t *testing.T, lim propLimiter, tb *TokenBucket, burst, iv int64) {
	var clock atomic.Int64
	clock.Store(int64(time.Hour))
	var admitted, given atomic.Int64
	var lo, hi atomic.Int64
	lo.Store(int64(time.Hour))
	hi.Store(int64(time.Hour))
	note := func(at time.Duration) {
		for v := lo.Load(); int64(at) < v && !lo.CompareAndSwap(v, int64(at)); v = lo.Load() {
		}
		for v := hi.Load(); int64(at) > v && !hi.CompareAndSwap(v, int64(at)); v = hi.Load() {
		}
	}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range 3000 {
				now := time.Duration(clock.Load())
				if r.IntN(4) == 0 {
					now = time.Duration(clock.Add(r.Int64N(iv)))
				}
				n := 1 + r.Int64N(burst)
				switch op := r.IntN(10); {
				case op < 6:
					d, tk := admit(lim, sluice.WithCost(context.Background(), n), now)
					if !d.Allowed {
						continue
					}
					admitted.Add(n * iv)
					note(now)
					if r.IntN(3) == 0 {
						lim.Done(tk, sluice.Released, now, 0)
						given.Add(n * iv)
					} else {
						lim.Done(tk, sluice.Success, now, 0)
					}
				case op < 8:
					if lim.allowNAt(now, n) {
						admitted.Add(n * iv)
						note(now)
					}
				default:
					if tb == nil {
						continue
					}
					res := tb.reserveNAt(now, n)
					if !res.ok {
						continue
					}
					admitted.Add(n * iv)
					note(now + res.delayFrom(now))
					if r.IntN(2) == 0 {
						res.cancelAt(now)
						given.Add(n * iv)
					}
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%dns admitted, %dns given back, over %v", admitted.Load(), given.Load(), time.Duration(hi.Load()-lo.Load()))
	tau := burst * iv
	if a, g, span := admitted.Load(), given.Load(), hi.Load()-lo.Load(); a-g > tau+span {
		t.Fatalf("admitted %dns of tokens, %dns given back, over %v: more than %dns", a, g, time.Duration(span), tau+span)
	}
}

func TestPropertyConcurrentBuckets(t *testing.T) {
	g, err := NewGCRA(PerSecond(1000), 20)
	if err != nil {
		t.Fatal(err)
	}
	concurrentBound(t, g, nil, 20, g.cfg.Load().iv)
	tb, err := NewTokenBucket(PerSecond(1000), 20)
	if err != nil {
		t.Fatal(err)
	}
	concurrentBound(t, tb, tb, 20, tb.cfg.Load().iv)
	lb, err := NewLeakyBucket(PerSecond(1000), 20)
	if err != nil {
		t.Fatal(err)
	}
	concurrentBound(t, lb, nil, 20, lb.cfg.Load().unit)
}

// TestPropertyKeyed drives a Keyed of GCRAs with random keys, costs,
// releases, expiries and time steps, and checks that it never holds more
// keys than its cap, and that, when its keys fit in the cap, no key is ever
// admitted beyond its own limiter's bound: a key forgotten for idleness
// (with an idle TTL of the limiter's refill time) comes back as full as it
// would have been.
func TestPropertyKeyed(t *testing.T) {
	propSeeds(t, propBudget(t), func(seed uint64) {
		r := rand.New(rand.NewPCG(seed, 0x5eed))
		rt, burst := PerSecond(10), int64(1+r.IntN(4))
		iv, tau := interval(rt), int64(burst)*interval(rt)
		maxKeys := 1 + r.IntN(8)
		pool := 1 + r.IntN(12)
		clk := sluice.NewManualClock(0)
		opts := []Option{WithClock(clk)}
		if r.IntN(2) == 0 {
			opts = append(opts, WithIdleTTL(time.Duration(tau)))
		}
		k, err := NewKeyed(func(string) (sluice.Policy, error) { return NewGCRA(rt, burst) }, append(opts, WithMaxKeys(maxKeys))...)
		if err != nil {
			t.Fatal(err)
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d (burst %d, %d keys of %d, %d opts): %s", seed, burst, pool, maxKeys, len(opts), fmt.Sprintf(format, args...))
		}
		now := time.Duration(r.Int64N(1e12))
		runs := make([]propRun, pool) // each key's admissions and releases
		for i := range runs {
			runs[i].s = propSubject{iv: iv, tau: tau}
		}
		type held struct {
			tk  sluice.Ticket
			key int
			adm int
			at  time.Duration
		}
		var out []held
		peakBusy := 0 // keys with calls in flight, at most, since k held no more than maxKeys
		for range 400 {
			key := r.IntN(pool)
			name := fmt.Sprint("k", key)
			n := int64(1)
			if r.IntN(3) == 0 {
				n = 1 + r.Int64N(burst+1)
			}
			p := &runs[key]
			switch op := r.IntN(12); {
			case op < 3:
				now += time.Duration(r.Int64N(tau))
			case op < 6:
				ctx := sluice.WithCost(sluice.WithKey(context.Background(), name), n)
				var tk sluice.Ticket
				var ok bool
				var d sluice.Decision
				d, tk = admit(k, ctx, now)
				ok = d.Allowed
				if d.Policy != k.Name() || ok != (tk != 0) {
					fail("Admit: %+v, ticket %d", d, tk)
				}
				if ok {
					out = append(out, held{tk, key, p.admit(now, n, 0), now})
				}
			case op < 8:
				d := decideKeyAt(k, now, name, n)
				if d.Allowed {
					p.admit(now, n, 0)
				}
			case op < 9:
				clk.Set(now)
				if allowKey(k, now, name) {
					p.admit(now, 1, 0)
				}
			case op < 11:
				if len(out) == 0 {
					continue
				}
				j := r.IntN(len(out))
				h := out[j]
				out = append(out[:j], out[j+1:]...)
				o := []sluice.Outcome{sluice.Success, sluice.Released}[r.IntN(2)]
				k.Done(h.tk, o, now, now-h.at)
				k.Done(h.tk, o, now, now-h.at) // a second Done of a ticket does nothing
				if o == sluice.Released {
					runs[h.key].release(h.adm)
				}
			default:
				k.expire(now)
			}
			// Over the cap only by a new key that found every key held
			// with a call in flight, none idle to evict; those over it go
			// when the next new key comes.
			busy := map[int]bool{}
			for _, h := range out {
				busy[h.key] = true
			}
			l := k.Len()
			if l <= maxKeys {
				peakBusy = len(busy)
			}
			peakBusy = max(peakBusy, len(busy))
			if l > max(maxKeys, peakBusy+1) {
				fail("%d keys held, cap %d, at most %d with calls in flight since under it", l, maxKeys, peakBusy)
			}
		}
		if pool <= maxKeys {
			for i := range runs {
				runs[i].t, runs[i].seed = t, seed
				runs[i].s.name = fmt.Sprint("keyed key ", i)
				runs[i].checkTAT()
			}
		}
	})
}

// TestPropertyKeyedConcurrent has workers share a few keys of a Keyed and
// checks each key's aggregate bound, and the cap on keys, at the end.
func TestPropertyKeyedConcurrent(t *testing.T) {
	const keys, burst = 4, 5
	rt := PerSecond(1000)
	iv := interval(rt)
	k, err := NewKeyed(func(string) (sluice.Policy, error) { return NewGCRA(rt, burst) },
		WithMaxKeys(keys), WithIdleTTL(time.Duration(burst*iv)))
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	var admitted, given [keys]atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 3))
			for range 3000 {
				now := time.Duration(clock.Add(r.Int64N(iv / 2)))
				key := r.IntN(keys)
				n := 1 + r.Int64N(burst)
				ctx := sluice.WithCost(sluice.WithKey(context.Background(), fmt.Sprint(key)), n)
				d, tk := admit(k, ctx, now)
				if !d.Allowed {
					continue
				}
				admitted[key].Add(n)
				o := []sluice.Outcome{sluice.Success, sluice.Released}[r.IntN(2)]
				k.Done(tk, o, now, 0)
				if o == sluice.Released {
					given[key].Add(n)
				}
				if r.IntN(50) == 0 {
					k.expire(now)
				}
			}
		})
	}
	wg.Wait()
	span := clock.Load()
	for key := range keys {
		if a, g := admitted[key].Load(), given[key].Load(); (a-g)*iv > burst*iv+span {
			t.Errorf("key %d: %d admitted, %d given back over %v", key, a, g, time.Duration(span))
		}
	}
	if k.Len() > keys {
		t.Errorf("%d keys held, cap %d", k.Len(), keys)
	}
}
