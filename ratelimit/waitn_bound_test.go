package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// WaitN without a deadline refuses tokens whose taking would leave the
// bucket in debt past 2^62ns, and its rejection tells when they would come:
// 2^40ns here, not the 292 years of the debt's bound.
func TestWaitNPastTheDebtBoundTellsWhenTheTokensCome(t *testing.T) {
	clk := sluice.NewManualClock(0)
	const iv = time.Duration(1) << 40 // one token every ~18 minutes
	const burst = int64(1) << 22      // burst × interval = 2^62ns exactly: accepted
	tb, err := ratelimit.NewTokenBucket(ratelimit.Every(iv), burst, ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if !tb.AllowN(burst) {
		t.Fatal("a full bucket refused its burst")
	}
	err = tb.WaitN(context.Background(), 1)
	if !errors.Is(err, ratelimit.ErrWouldExceedDeadline) {
		t.Fatalf("WaitN: %v, want ErrWouldExceedDeadline (the bucket's debt would pass 2^62ns)", err)
	}
	d, _ := sluice.RejectionOf(err)
	if d.RetryAfter < iv || d.RetryAfter > iv+time.Millisecond {
		t.Fatalf("RetryAfter %v, want the token's due time, %v", d.RetryAfter, iv)
	}
}
