package breaker

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// hungProbe learns a usual latency of 100 ms, trips b, lets the open
// period pass and admits one probe that never ends; it returns the phase
// of that probe and an instant past its wait.
func hungProbe(t *testing.T, b *Breaker) (*phase, time.Duration) {
	t.Helper()
	ctx := context.Background()
	now := time.Second
	for range 20 {
		tk, _, err := b.Admit(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		b.Done(tk, sluice.Success, now+100*time.Millisecond, 100*time.Millisecond)
		now += 50 * time.Millisecond
	}
	for range 5 {
		tk, _, err := b.Admit(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		b.Done(tk, sluice.Failure, now+time.Millisecond, time.Millisecond)
		now += 50 * time.Millisecond
	}
	if b.State() != StateOpen {
		t.Fatalf("not open: %v", b.State())
	}
	now += 2 * time.Second
	if _, _, err := b.Admit(ctx, now); err != nil { // the probe, which hangs
		t.Fatal(err)
	}
	p := b.cur.Load()
	if p.state != StateHalfOpen {
		t.Fatalf("not half-open: %v", p.state)
	}
	return p, now + b.probeWait() + time.Millisecond
}

// A caller that loaded the half-open phase just before a Reset (Admit
// reads b.cur once, then finds the probe hung) does not leave the Reset
// breaker with the longer wait of hung probes.
func TestResetRacingAHungProbeCheckKeepsTheWait(t *testing.T) {
	b, err := New("dep", WithClock(sluice.NewManualClock(0)), WithOpenDuration(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p, now := hungProbe(t, b)
	b.Reset()
	// The Admit that loaded p before the Reset goes on with it.
	if _, _, err := b.admitSlow(p, now); err != nil {
		t.Fatal(err)
	}
	if b.State() != StateClosed {
		t.Fatalf("state %v after Reset", b.State())
	}
	if h := b.hungWait.Load(); h != 0 {
		t.Fatalf("hungWait %v after Reset: a stale caller's probesHung outlived the Reset (a fresh breaker has 0)", time.Duration(h))
	}
}
