package main

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"sort"
	"sync"
	"time"
)

// class is how a request ended, seen from the user.
type class uint8

const (
	classOK       class = iota // the real answer
	classFallback              // a degraded answer: the fallback served
	classRejected              // 429 or 503 from the guard: told to come back later
	classError                 // a 5xx from the frontend, or no answer in time
)

// sample is one request of the load.
type sample struct {
	route   int           // 0: the route on the healthy endpoint, 1: on the flaky one
	at      time.Duration // when it was sent, since the start of the run
	latency time.Duration
	class   class
}

// gauge is one reading of the process.
type gauge struct {
	at         time.Duration
	goroutines int
	heap       uint64
}

// drive offers an open-loop load of cfg.Rate requests per second, alternating
// between the two routes, for the whole scenario, and returns every request's
// sample and the process gauges read every 100 ms. It sends at most
// Rate×Duration requests and waits for each at most cfg.ClientTimeout.
func drive(ctx context.Context, cfg Config, base string, start time.Time, onTick func(time.Duration)) ([]sample, []gauge) {
	total := cfg.total()
	n := int(float64(cfg.Rate) * total.Seconds())
	interval := time.Second / time.Duration(cfg.Rate)
	client := &http.Client{
		Timeout: cfg.ClientTimeout,
		Transport: &http.Transport{
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     30 * time.Second,
		},
	}
	defer client.CloseIdleConnections()
	paths := [2]string{base + routePaths[0], base + routePaths[1]}

	samples := make([]sample, n)
	var wg sync.WaitGroup

	gauges := make([]gauge, 0, int(total/(100*time.Millisecond))+16)
	stopGauges := make(chan struct{})
	gaugesDone := make(chan struct{})
	go func() {
		defer close(gaugesDone)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-stopGauges:
				return
			case <-t.C:
				runtime.ReadMemStats(&ms)
				at := time.Since(start)
				gauges = append(gauges, gauge{at: at, goroutines: runtime.NumGoroutine(), heap: ms.HeapInuse})
				if onTick != nil {
					onTick(at)
				}
			}
		}
	}()

	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				n = i
			}
		}
		if ctx.Err() != nil {
			n = i
			break
		}
		route := i % 2
		wg.Add(1)
		go func(i, route int) {
			defer wg.Done()
			at := time.Since(start)
			cl := call(client, paths[route])
			samples[i] = sample{route: route, at: at, latency: time.Since(start) - at, class: cl}
		}(i, route)
	}
	wg.Wait()
	close(stopGauges)
	<-gaugesDone
	return samples[:n], gauges
}

func call(client *http.Client, url string) class {
	resp, err := client.Get(url)
	if err != nil {
		return classError
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
		if resp.Header.Get("Retry-After") != "" {
			return classRejected
		}
		return classError
	case resp.StatusCode >= 500:
		return classError
	case resp.Header.Get(fallbackHeader) != "":
		return classFallback
	}
	return classOK
}

// phaseStats is what one phase of one run looked like for one route.
type phaseStats struct {
	count                          int
	ok, fallback, rejected, failed float64 // shares in percent
	p50, p99, max                  time.Duration
	fallbackP99                    time.Duration // p99 of the answers the fallback served
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func stats(samples []sample) phaseStats {
	var s phaseStats
	s.count = len(samples)
	if s.count == 0 {
		return s
	}
	lats := make([]time.Duration, 0, len(samples))
	var fb []time.Duration
	counts := [4]int{}
	for _, x := range samples {
		lats = append(lats, x.latency)
		counts[x.class]++
		if x.class == classFallback {
			fb = append(fb, x.latency)
		}
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	sort.Slice(fb, func(i, j int) bool { return fb[i] < fb[j] })
	pct := func(c int) float64 { return 100 * float64(c) / float64(s.count) }
	s.ok, s.fallback, s.rejected, s.failed = pct(counts[classOK]), pct(counts[classFallback]), pct(counts[classRejected]), pct(counts[classError])
	s.p50, s.p99, s.max = percentile(lats, 0.50), percentile(lats, 0.99), lats[len(lats)-1]
	s.fallbackP99 = percentile(fb, 0.99)
	return s
}
