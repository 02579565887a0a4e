package statelog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

type steppedClock struct{ now atomic.Int64 }

func (c *steppedClock) Now() time.Duration { return time.Duration(c.now.Load()) }

// A change that comes while earlier ones wait for a token queues behind
// them: the token is not spent twice, and the records keep their order.
func TestAChangeQueuesBehindTheChangesLeftOut(t *testing.T) {
	var buf bytes.Buffer
	clk := &steppedClock{}
	l, err := New(slog.New(slog.NewTextHandler(&buf, nil)), WithLimit(1, time.Second), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	p := &policyLog{l: l, guard: "api", policy: "grp", tokens: 1}
	p.changed(sluice.StateChange{Policy: "grp/a", From: "closed", To: "open"})
	clk.now.Store(int64(100 * time.Millisecond))
	p.changed(sluice.StateChange{Policy: "grp/b", From: "closed", To: "open"}) // left out: the timer waits
	p.mu.Lock()
	if p.timer == nil {
		p.mu.Unlock()
		t.Fatal("no timer armed")
	}
	p.timer.Stop() // as if its callback had not yet taken p.mu
	gen := p.gen
	p.mu.Unlock()
	clk.now.Store(int64(1100 * time.Millisecond))
	p.changed(sluice.StateChange{Policy: "grp/c", From: "closed", To: "open"})
	p.flush(gen)
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 2 {
		t.Errorf("%d records by 1.1 s with WithLimit(1, 1s), want 2:\n%s", n, out)
	}
	if !strings.Contains(out, "grp/b") || strings.Contains(out, "grp/c") {
		t.Errorf("b, left out first, goes first:\n%s", out)
	}
	p.detach()
}
