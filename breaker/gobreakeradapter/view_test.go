package gobreakeradapter_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker/gobreakeradapter"
	"github.com/sluice-go/sluice/internal/breakerview"
)

// The view's Counts are those of the window while closed: gobreaker clears
// a window gone by only when its state is read, which the view does first,
// or the dashboard and the failure-ratio gauge would show the failures of
// a window that ended long ago while no call comes.
func TestTheViewReadsAWindowGoneByAsEmpty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := gobreakeradapter.New(gobreaker.Settings{Name: "dep", Interval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			tk, _, err := p.Admit(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			p.Done(tk, sluice.Failure, 0, 0)
		}
		b := breakerview.Of(p).(breakerview.Breaker)
		if c := b.Counts(); c.Failures != 2 {
			t.Fatalf("within the window: %+v, want 2 failures", c)
		}
		time.Sleep(time.Minute) // 60 windows of 1s, no call
		if c := b.Counts(); c.Requests != 0 || c.Failures != 0 {
			t.Fatalf("a minute after a 1s window ended the view reads %d requests, %d failures (ratio %.1f); want 0: the window is over",
				c.Requests, c.Failures, float64(c.Failures)/float64(max(c.Requests, 1)))
		}
	})
}

// A Policy that OpenFor holds for 5s while gobreaker itself stays open for
// another minute tells a rejected caller the later of the two instants, or
// a client honouring it would be rejected again.
func TestAHeldPolicyTellsTheLaterOfTwoOpenings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := gobreakeradapter.New(gobreaker.Settings{Name: "dep", Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for range 6 { // gobreaker's default trips past 5 failures in a row
			tk, _, err := p.Admit(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			p.Done(tk, sluice.Failure, 0, 0)
		}
		if _, q, err := p.Admit(context.Background(), 0); err == nil || q.RetryAfter < 59*time.Second {
			t.Fatalf("tripped: err %v, RetryAfter %v; want open for a minute", err, q.RetryAfter)
		}
		p.OpenFor(context.Background(), 0, 5*time.Second)
		_, q, err := p.Admit(context.Background(), 0)
		if err == nil {
			t.Fatal("admitted while open")
		}
		if q.RetryAfter < 59*time.Second {
			t.Fatalf("RetryAfter %v while gobreaker stays open for another minute: a caller retrying then is rejected again", q.RetryAfter)
		}
	})
}

// A held Admit reads gobreaker's state, which moves an open breaker whose
// Timeout has passed to half-open: the listeners hear that change when the
// Admit returns, not once the hold ends.
func TestAHeldAdmitDeliversTheChangeItCaused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var changed []string // gobreaker's own changes, as they happen
		p, err := gobreakeradapter.New(gobreaker.Settings{Name: "dep", Timeout: time.Second,
			OnStateChange: func(_ string, from, to gobreaker.State) { changed = append(changed, from.String()+">"+to.String()) }})
		if err != nil {
			t.Fatal(err)
		}
		var heard []string
		p.Subscribe(func(c sluice.StateChange) { heard = append(heard, c.From+">"+c.To) })
		for range 6 {
			tk, _, err := p.Admit(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			p.Done(tk, sluice.Failure, 0, 0)
		}
		if len(heard) != 1 {
			t.Fatalf("heard %v after tripping; want one change to open", heard)
		}
		p.OpenFor(context.Background(), 0, time.Hour)
		time.Sleep(2 * time.Second) // gobreaker's Timeout passes
		if _, _, err := p.Admit(context.Background(), 2*time.Second); err == nil {
			t.Fatal("admitted while held")
		}
		if len(changed) != 2 || len(heard) != 2 {
			t.Fatalf("gobreaker made %v; the listeners heard %v", changed, heard)
		}
	})
}
