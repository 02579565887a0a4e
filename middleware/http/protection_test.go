package sluicehttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
)

// bubbleClock is the bubble's clock, as a sluice.Clock: made inside a
// synctest bubble, it reads the bubble's fake time.
type bubbleClock struct{ origin time.Time }

func (c bubbleClock) Now() time.Duration { return time.Since(c.origin) }

// roundOf sends n requests at once to h and waits for all of them; each
// client gives up (its context is canceled, as net/http does when the
// connection closes) after patience, unless patience is 0.
func roundOf(h http.Handler, n int, patience time.Duration) []int {
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if patience > 0 {
				t := time.AfterFunc(patience, cancel)
				defer t.Stop()
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
			codes[i] = rec.Code
		})
	}
	wg.Wait()
	return codes
}

// A Shedder in front of a handler whose latency goes from 10 ms to 2 s,
// behind clients that give up after 200 ms (a load balancer's timeout):
// every admitted request runs 20 times its baseline. The middleware counts
// a request whose client went away for nothing, yet the Shedder learns its
// latency, as a bound (the request would have run longer), and its limit
// comes down; the bound is never taken for the baseline.
func TestTheShedderSeesAClogWhoseClientsGiveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := adaptive.NewShedder()
		require.NoError(t, err)
		g, err := sluice.New(sluice.With(s), sluice.WithClock(bubbleClock{time.Now()}))
		require.NoError(t, err)
		defer g.Close()
		var slow atomic.Bool
		h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d := 10 * time.Millisecond
			if slow.Load() {
				d = 2 * time.Second
			}
			select {
			case <-time.After(d):
				w.WriteHeader(http.StatusOK)
			case <-r.Context().Done(): // the handler honours its context
			}
		}))
		// Healthy: the Shedder learns a 10 ms baseline.
		for range 30 {
			roundOf(h, 12, 0)
		}
		before := s.Stats()
		require.InDelta(t, float64(10*time.Millisecond), float64(before.AvgRT), float64(2*time.Millisecond))
		// Sick: each request would take 2 s; its client gives up at 200 ms.
		slow.Store(true)
		for range 20 {
			roundOf(h, 30, 200*time.Millisecond)
		}
		after := s.Stats()
		t.Logf("before %+v\nafter  %+v", before, after)
		require.Greater(t, after.AvgRT, 3*before.AvgRT,
			"4 s of requests held 200 ms each (20x the baseline): the Shedder must have seen their latency")
		require.Less(t, after.Limit, before.Limit, "the limit must come down when every request runs 20x its baseline")
		require.Less(t, after.Baseline, 2*before.Baseline,
			"the clients' patience (their latency, a bound) is no baseline of the service's")
	})
}

// openLoop sends one request to h every gap for d, each on its own
// goroutine, and counts the answers by status once all have ended.
func openLoop(h http.Handler, gap, d time.Duration) map[int]int {
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(gap) {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			mu.Lock()
			codes[rec.Code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}

// A Shedder in front of a handler bound by a pool of 16 connections held
// 20 ms each (800 requests a second), offered 500 a second. For 3 s the
// database refuses connections and the handler fails fast (500 after
// 1 ms); then it heals. The fast failures do not set the baseline: once
// healthy, the service at 62% of its capacity is not shed, as it is not
// without the failing spell.
func TestTheShedderShedsNoHealthyLoadAfterFastFailures(t *testing.T) {
	for _, spell := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			s, err := adaptive.NewShedder()
			require.NoError(t, err)
			g, err := sluice.New(sluice.With(s), sluice.WithClock(bubbleClock{time.Now()}))
			require.NoError(t, err)
			defer g.Close()
			pool := make(chan struct{}, 16)
			var failing atomic.Bool
			h := mw(t, WithGuard(g))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if failing.Load() {
					time.Sleep(time.Millisecond) // connection refused
					w.WriteHeader(http.StatusInternalServerError)
					return
				}
				pool <- struct{}{}
				time.Sleep(20 * time.Millisecond)
				<-pool
				w.WriteHeader(http.StatusOK)
			}))
			gap := 2 * time.Millisecond
			warm := openLoop(h, gap, 3*time.Second)
			failing.Store(spell)
			openLoop(h, gap, 3*time.Second)
			failing.Store(false)
			healed := openLoop(h, gap, 2*time.Second)
			t.Logf("spell %v: warm %v, healed %v, %+v", spell, warm, healed, s.Stats())
			require.Zero(t, healed[http.StatusServiceUnavailable],
				"a healthy service at 62%% of its capacity must not be shed (spell %v)", spell)
		})
	}
}
