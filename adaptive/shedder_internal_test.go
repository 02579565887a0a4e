package adaptive

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

// served is what the queue judges overload against: how many requests a
// second the slots serve. A quick failure feeds no sample, and is served
// all the same: a service half of whose requests fail fast (one route's
// database refusing connections) is not read as serving half as many, or
// its queue would turn LIFO and standing at half the backlog.
func TestShedderCountsQuickFailuresServed(t *testing.T) {
	ctx := context.Background()
	s, err := NewShedder()
	require.NoError(t, err)
	now := time.Second
	for i := range 400 { // one request every 5 ms: 200 a second
		tk, _, err := s.Admit(ctx, now)
		require.NoError(t, err)
		if i%2 == 0 {
			s.Done(tk, sluice.Success, now+8*time.Millisecond, 8*time.Millisecond)
		} else {
			s.Done(tk, sluice.Failure, now+time.Millisecond, time.Millisecond) // connection refused
		}
		now += 5 * time.Millisecond
	}
	require.InDelta(t, 200, s.served.Load(), 20, "200 requests a second ended Success or Failure")
}

// A quick Ignored end (a 4xx answered at once) frees its slot as a quick
// failure does, and is served all the same: a route half of whose requests
// are refused as malformed is not read as serving half as many.
func TestShedderCountsQuickIgnoredServed(t *testing.T) {
	ctx := context.Background()
	s, err := NewShedder()
	require.NoError(t, err)
	now := time.Second
	for i := range 400 { // one request every 5 ms: 200 a second
		tk, _, err := s.Admit(ctx, now)
		require.NoError(t, err)
		if i%2 == 0 {
			s.Done(tk, sluice.Success, now+8*time.Millisecond, 8*time.Millisecond)
		} else {
			s.Done(tk, sluice.Ignored, now+time.Millisecond, time.Millisecond) // a 400
		}
		now += 5 * time.Millisecond
	}
	require.InDelta(t, 200, s.served.Load(), 20, "200 requests a second freed their slots")
}
