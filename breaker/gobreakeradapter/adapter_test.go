package gobreakeradapter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker/gobreakeradapter"
	"github.com/sluice-go/sluice/internal/policytest"
)

// admit asks p to admit a request at now, and returns the Decision its
// answer stands for and its Ticket.
func admit(p sluice.Policy, ctx context.Context, now time.Duration) (sluice.Decision, sluice.Ticket) {
	return policytest.Admit(ctx, p, now)
}

func consecutive(n uint32) func(gobreaker.Counts) bool {
	return func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= n }
}

func TestConformance(t *testing.T) {
	policytest.Run(t, policytest.Config{
		New: func(t *testing.T) sluice.Policy {
			p, err := gobreakeradapter.New(gobreaker.Settings{
				Name: "conf", MaxRequests: 2, Timeout: time.Millisecond, ReadyToTrip: consecutive(1),
			})
			require.NoError(t, err)
			return p
		},
		Causes:    []error{sluice.ErrCircuitOpen},
		WallClock: true,
	})
}

func TestRejectionsAndRetryAfter(t *testing.T) {
	var heard []string
	p, err := gobreakeradapter.New(gobreaker.Settings{
		Name: "pay", Timeout: time.Hour, ReadyToTrip: consecutive(2),
		OnStateChange: func(name string, from, to gobreaker.State) { heard = append(heard, name+" "+to.String()) },
	})
	require.NoError(t, err)
	assert.Equal(t, "breaker/pay", p.Name())
	var changes []sluice.StateChange
	defer p.Subscribe(func(c sluice.StateChange) { changes = append(changes, c) })()
	g, err := sluice.New(sluice.With(p))
	require.NoError(t, err)
	defer g.Close()
	ctx := context.Background()
	boom := errors.New("boom")
	for range 5 {
		require.ErrorIs(t, g.Do(ctx, func(context.Context) error { return context.Canceled }), context.Canceled)
	}
	assert.Equal(t, gobreaker.StateClosed, p.Breaker().State(), "ignored calls are excluded")
	assert.Zero(t, p.Breaker().Counts().TotalFailures)
	for range 2 {
		require.ErrorIs(t, g.Do(ctx, func(context.Context) error { return boom }), boom)
	}
	assert.Equal(t, gobreaker.StateOpen, p.Breaker().State())
	err = g.Do(ctx, func(context.Context) error { return nil })
	require.ErrorIs(t, err, sluice.ErrCircuitOpen)
	d, ok := sluice.RejectionOf(err)
	require.True(t, ok)
	assert.Greater(t, d.RetryAfter, 59*time.Minute)
	assert.LessOrEqual(t, d.RetryAfter, time.Hour+time.Millisecond, "rounded up to the millisecond")
	assert.Equal(t, []string{"pay open"}, heard)
	require.Len(t, changes, 1)
	assert.Equal(t, "breaker/pay", changes[0].Policy)
	assert.Equal(t, [2]string{"closed", "open"}, [2]string{changes[0].From, changes[0].To})
}

func TestReleasedProbeFreesItsSlot(t *testing.T) {
	// gobreaker reads the wall clock: the bubble's fake time moves it.
	synctest.Test(t, releasedProbe)
}

func releasedProbe(t *testing.T) {
	p, err := gobreakeradapter.New(gobreaker.Settings{
		MaxRequests: 1, Timeout: time.Millisecond, ReadyToTrip: consecutive(1),
	})
	require.NoError(t, err)
	ctx := context.Background()
	d, tk := admit(p, ctx, 0)
	require.True(t, d.Allowed)
	p.Done(tk, sluice.Failure, 0, 0)
	time.Sleep(2 * time.Millisecond)
	require.Equal(t, gobreaker.StateHalfOpen, p.Breaker().State())
	d, tk = admit(p, ctx, 0)
	require.True(t, d.Allowed)
	d2, _ := admit(p, ctx, 0)
	assert.False(t, d2.Allowed, "one probe only")
	assert.Positive(t, d2.RetryAfter)
	p.Done(tk, sluice.Released, 0, 0)
	d, tk = admit(p, ctx, 0)
	require.True(t, d.Allowed, "the released probe's slot is free again")
	p.Done(tk, sluice.Success, 0, 0)
	assert.Equal(t, gobreaker.StateClosed, p.Breaker().State())
}

func TestIgnoredAndRepeatedOutcomesDoNotCount(t *testing.T) {
	p, err := gobreakeradapter.New(gobreaker.Settings{
		Name: "legacy", Timeout: time.Minute, ReadyToTrip: consecutive(1),
	})
	require.NoError(t, err)
	ctx := context.Background()
	for _, o := range []sluice.Outcome{sluice.Ignored, sluice.Released} {
		d, tk := admit(p, ctx, 0)
		require.True(t, d.Allowed)
		p.Done(tk, o, 0, 0)
		assert.Equal(t, gobreaker.StateClosed, p.Breaker().State(), "%v", o)
	}
	d, tk := admit(p, ctx, 0)
	require.True(t, d.Allowed)
	p.Done(tk, sluice.Failure, 0, 0)
	p.Done(tk, sluice.Failure, 0, 0) // a second Done for one ticket is ignored
	d, _ = admit(p, ctx, 0)
	assert.False(t, d.Allowed)
	assert.InDelta(t, float64(time.Minute), float64(d.RetryAfter), float64(time.Second))

	_, err = gobreakeradapter.New(gobreaker.Settings{Timeout: -1})
	assert.Error(t, err)
}

// A team's tuned gobreaker settings, behind a Guard.
func ExampleNew() {
	p, err := gobreakeradapter.New(gobreaker.Settings{
		Name:        "payments",
		MaxRequests: 3,
		Timeout:     30 * time.Second,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 2 },
	})
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(p))
	if err != nil {
		panic(err)
	}
	defer g.Close()
	for range 3 {
		err = g.Do(context.Background(), func(context.Context) error { return errors.New("down") })
	}
	fmt.Println(errors.Is(err, sluice.ErrCircuitOpen), p.Breaker().State())
	// Output:
	// true open
}

// TestGuardAgreesWhileTheClockStandsStill drives two Policies, one through
// Admit and Done and one through a Guard, which tells Done no end instant
// (latency -1) since the Policy needs none, with an open duration no test
// outlasts: gobreaker's wall clock then changes nothing, and they must
// decide alike.
func TestGuardAgreesWhileTheClockStandsStill(t *testing.T) {
	mk := func() *gobreakeradapter.Policy {
		p, err := gobreakeradapter.New(gobreaker.Settings{
			Name: "still", Timeout: time.Hour, ReadyToTrip: consecutive(3),
		})
		require.NoError(t, err)
		return p
	}
	a, b := mk(), mk()
	g, err := sluice.New(sluice.With(b))
	require.NoError(t, err)
	ctx := context.Background()
	outcomes := []sluice.Outcome{sluice.Success, sluice.Failure, sluice.Ignored, sluice.Released,
		sluice.Failure, sluice.Failure, sluice.Success, sluice.Failure, sluice.Failure, sluice.Failure}
	rejected := 0
	for i := range 40 {
		began := time.Now()
		da, ta := admit(a, ctx, 0)
		var call sluice.Call
		err := g.Begin(ctx, &call)
		db := call.Decision()
		// gobreaker reads the wall clock for each: their RetryAfters differ
		// by the time between the two admissions, and the millisecond the
		// Guard rounds to.
		apart := time.Since(began) + time.Millisecond
		require.Equal(t, da.Allowed, db.Allowed, "call %d", i)
		if !da.Allowed {
			rejected++
			require.InDelta(t, float64(da.RetryAfter), float64(db.RetryAfter), float64(apart), "call %d", i)
			db.RetryAfter = da.RetryAfter
			require.Equal(t, da, db, "call %d", i)
			d, ok := sluice.RejectionOf(err)
			require.True(t, ok, "call %d", i)
			require.Equal(t, da.Policy, d.Policy, "call %d", i)
			continue
		}
		require.NoError(t, err)
		o := outcomes[i%len(outcomes)]
		a.Done(ta, o, 0, 0)
		call.Report(o, nil)
	}
	assert.Equal(t, gobreaker.StateOpen, b.Breaker().State())
	assert.Positive(t, rejected)
}

// A listener that panics on the change to half-open, heard in the Admit that
// takes the probe, does not keep the probe's slot: the call never runs, and
// the next call may probe.
func TestPanickingListenerAtAProbeFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := gobreakeradapter.New(gobreaker.Settings{
			MaxRequests: 1, Timeout: time.Millisecond, ReadyToTrip: consecutive(1),
		})
		require.NoError(t, err)
		panicking := true
		p.Subscribe(func(c sluice.StateChange) {
			if panicking && c.To == gobreaker.StateHalfOpen.String() {
				panic("listener")
			}
		})
		ctx := context.Background()
		d, tk := admit(p, ctx, 0)
		require.True(t, d.Allowed)
		p.Done(tk, sluice.Failure, 0, 0)
		time.Sleep(2 * time.Millisecond)
		require.PanicsWithValue(t, "listener", func() { p.Admit(ctx, 0) })
		panicking = false
		d, tk = admit(p, ctx, 0)
		require.True(t, d.Allowed, "the probe of the panicked Admit gave its slot back")
		p.Done(tk, sluice.Success, 0, 0)
		assert.Equal(t, gobreaker.StateClosed, p.Breaker().State())
	})
}

// Settings the adapter could not honour are an error: IsSuccessful and
// IsExcluded would see only the adapter's own errors, never the call's (a
// team's "only server errors fail" would count every failure a success),
// gobreaker drops a BucketPeriod without an Interval, and stretches an
// Interval a BucketPeriod does not divide to whole buckets (a BucketPeriod
// of a minute makes an Interval of a second remember a minute).
func TestNewRefusesSettingsItCannotHonour(t *testing.T) {
	for name, st := range map[string]gobreaker.Settings{
		"IsSuccessful":               {IsSuccessful: func(error) bool { return true }},
		"IsExcluded":                 {IsExcluded: func(error) bool { return false }},
		"BucketPeriod, no Interval":  {BucketPeriod: time.Second},
		"BucketPeriod over Interval": {Interval: time.Second, BucketPeriod: time.Minute},
		"BucketPeriod not dividing":  {Interval: 10 * time.Second, BucketPeriod: 3 * time.Second},
	} {
		_, err := gobreakeradapter.New(st)
		assert.Error(t, err, name)
	}
	_, err := gobreakeradapter.New(gobreaker.Settings{Interval: 10 * time.Second, BucketPeriod: time.Second})
	assert.NoError(t, err)
}

// ReadyToTrip's counts leave out the calls that say nothing about the
// dependency (Released: a policy after the breaker rejected them): a
// dependency failing every call it gets trips a 60 % failure ratio, though
// a limiter behind the breaker turns half the calls away.
func TestReadyToTripCountsNoReleasedCalls(t *testing.T) {
	p, err := gobreakeradapter.New(gobreaker.Settings{
		Name:    "ratio",
		Timeout: time.Hour,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.Requests >= 3 && float64(c.TotalFailures)/float64(c.Requests) >= 0.6
		},
	})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 40 {
		d, tk := admit(p, ctx, 0)
		if !d.Allowed {
			assert.Equal(t, gobreaker.StateOpen, p.Breaker().State())
			return
		}
		if i%2 == 0 {
			p.Done(tk, sluice.Released, 0, 0)
		} else {
			p.Done(tk, sluice.Failure, 0, 0)
		}
	}
	t.Fatalf("20 failures of 20 calls made did not trip a 60%% failure ratio; counts: %+v", p.Breaker().Counts())
}
