package adaptive

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

// served is what the queue judges overload against: how many requests a
// second the slots serve. A quick failure (a connection refused) or a quick
// Ignored end (a 400 answered at once) feeds no sample, and is served all
// the same: a service half of whose requests end so is not read as serving
// half as many, or its queue would turn LIFO and standing at half the
// backlog.
func TestShedderCountsQuickEndsServed(t *testing.T) {
	for _, quick := range []sluice.Outcome{sluice.Failure, sluice.Ignored} {
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
				s.Done(tk, quick, now+time.Millisecond, time.Millisecond)
			}
			now += 5 * time.Millisecond
		}
		require.InDelta(t, 200, s.served.Load(), 20, "200 requests a second freed their slots, half of them ending %v", quick)
	}
}

// A probe whose cohort measures nothing (its requests all failed quicker
// than the baseline: connections refused) ends as though it had not run:
// the limit it lowered is the one before it again at once, not a window
// later.
func TestShedderProbeThatMeasuredNothingRestoresTheLimit(t *testing.T) {
	ctx := context.Background()
	s, err := NewShedder()
	require.NoError(t, err)
	now := time.Second
	end := func(o sluice.Outcome, lat time.Duration) {
		t.Helper()
		tk, _, err := s.Admit(ctx, now)
		require.NoError(t, err)
		s.Done(tk, o, now+lat, lat)
		now += 10 * time.Millisecond
	}
	for range 40 { // windows of 5 ms: the baseline
		end(sluice.Success, 5*time.Millisecond)
	}
	before := s.Stats().Limit
	for !s.Stats().Probing { // a rise the limit does not bind asks for a probe
		end(sluice.Success, 20*time.Millisecond)
		require.Less(t, now, 3*time.Second, "no probe was asked for")
	}
	require.Less(t, s.Stats().Limit, before)
	for s.Stats().Probing {
		end(sluice.Failure, time.Millisecond)
		require.Less(t, now, 5*time.Second, "the probe did not end")
	}
	require.Equal(t, before, s.Stats().Limit)
}
