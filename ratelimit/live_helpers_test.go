package ratelimit

import "time"

// setRateAt and setBurstAt change one of a bucket's numbers at an instant,
// for the tests that walk instants without a clock: SetLimit at now.
func (tb *TokenBucket) setRateAt(now time.Duration, r Rate) error {
	return setBucket(&tb.cfg, &tb.mu, "token bucket", r, tb.Burst(), int64(now))
}

func (tb *TokenBucket) setBurstAt(now time.Duration, burst int64) error {
	return setBucket(&tb.cfg, &tb.mu, "token bucket", tb.Rate(), burst, int64(now))
}
