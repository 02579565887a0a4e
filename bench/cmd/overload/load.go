package main

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The load generator: open-loop arrivals on a fixed schedule, one
// http.Client with a large pool of kept-alive connections.

const (
	clientTimeout = time.Second            // a client gives up after this
	objective     = 250 * time.Millisecond // an answer within it is goodput
)

func newClient() *http.Client {
	tr := &http.Transport{
		// No TCP keep-alive probes on loopback: a dial costs fewer calls.
		DialContext:         (&net.Dialer{Timeout: time.Second, KeepAlive: -1}).DialContext,
		MaxIdleConns:        8192,
		MaxIdleConnsPerHost: 8192,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &http.Client{Transport: tr}
}

// predial opens n connections to base and leaves them idle in the pool.
func predial(client *http.Client, base string, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := client.Get(base + "/ping")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
	wg.Wait()
}

// shot is one request of a schedule: when it is due, from the schedule's
// start, and which path it asks for.
type shot struct {
	at   time.Duration
	path int
}

// poisson returns arrivals at rate per second over total, from seed.
func poisson(rate float64, total time.Duration, seed uint64, path int) []shot {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil // run refuses such rates; none is a schedule
	}
	rnd := rand.New(rand.NewPCG(seed, uint64(rate*1000)))
	var out []shot
	t := 0.0
	for {
		t += rnd.ExpFloat64() / rate
		// Compared before the conversion, which a rate too low for the
		// run would overflow.
		if t*float64(time.Second) >= float64(total) {
			return out
		}
		out = append(out, shot{at: time.Duration(t * float64(time.Second)), path: path})
	}
}

// hook is something done at an instant of a schedule (the slow dependency
// turning sick, then healing). fire records when it ran.
type hook struct {
	at time.Duration
	fn func()
}

// result is one request's fate. lat is counted from when it was due.
type result struct {
	due    time.Duration
	lat    time.Duration
	status int // 0: no answer within clientTimeout
	answer string
}

// fire plays shots (sorted by at) against base+paths: each request is sent
// when due whatever is outstanding. It returns the results in the order of
// shots, and the instants (from the start) at which the hooks ran.
func fire(client *http.Client, base string, paths []string, shots []shot, hooks []hook) ([]result, []time.Duration) {
	urls := make([]string, len(paths))
	for i, p := range paths {
		urls[i] = base + p
	}
	res := make([]result, len(shots))
	ran := make([]time.Duration, len(hooks))
	var wg sync.WaitGroup
	start := time.Now()
	send := func(i int) {
		due := shots[i].at
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(due+clientTimeout))
		defer cancel()
		r := result{due: due}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, urls[shots[i].path], nil)
		resp, err := client.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if err == nil {
				r.status = resp.StatusCode
				r.answer = resp.Header.Get("X-Answer")
			}
		}
		r.lat = min(time.Since(start)-due, clientTimeout)
		if r.status == 0 {
			r.lat = clientTimeout // never answered: counted as given up on
		}
		res[i] = r
	}
	// Requests go to workers that wait for the next one when done, so that
	// their stacks, grown once, serve many requests; a request that finds no
	// worker waiting starts a new one.
	queue := make(chan int)
	worker := func(i int) {
		defer wg.Done()
		send(i)
		for i := range queue {
			send(i)
		}
	}
	next := 0
	for i := 0; i < len(shots) || next < len(hooks); {
		now := time.Since(start)
		for next < len(hooks) && hooks[next].at <= now {
			ran[next] = time.Since(start)
			wg.Go(hooks[next].fn)
			next++
		}
		for i < len(shots) && shots[i].at <= now {
			select {
			case queue <- i:
			default:
				wg.Add(1)
				go worker(i)
			}
			i++
		}
		wake := time.Duration(1 << 62)
		if i < len(shots) {
			wake = shots[i].at
		}
		if next < len(hooks) {
			wake = min(wake, hooks[next].at)
		}
		if wake < 1<<62 {
			time.Sleep(wake - time.Since(start))
		}
	}
	close(queue)
	wg.Wait()
	return res, ran
}

// closedLoop runs workers that each send the next request as soon as the
// last one is answered, for warm and then dur, and returns the successful
// answers per second during dur.
func closedLoop(client *http.Client, url string, workers int, warm, dur time.Duration) float64 {
	var counting atomic.Bool
	var ok atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(url)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK && counting.Load() {
					ok.Add(1)
				}
			}
		})
	}
	time.Sleep(warm)
	counting.Store(true)
	start := time.Now()
	time.Sleep(dur)
	n := ok.Load()
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	return float64(n) / elapsed.Seconds()
}

// cpuMeter measures the CPU this process (the load generator) uses.
type cpuMeter struct {
	wall time.Time
	cpu  time.Duration
}

func startCPU() cpuMeter { return cpuMeter{wall: time.Now(), cpu: processCPU()} }

// cores is the CPU used since m started, in cores.
func (m cpuMeter) cores() float64 {
	return float64(processCPU()-m.cpu) / float64(time.Since(m.wall))
}

// merge sorts the shots of several schedules into one.
func merge(s ...[]shot) []shot {
	var out []shot
	for _, x := range s {
		out = append(out, x...)
	}
	slices.SortFunc(out, func(a, b shot) int { return int(a.at - b.at) })
	return out
}
