package adaptive_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
)

// arrival is a request sent to a policy at an instant of a synctest bubble;
// its answer comes on got, with the instant it came.
type arrival struct {
	got chan answer
}

type answer struct {
	allowed bool
	at      time.Duration
}

func send(ctx context.Context, p sluice.Policy, now func() time.Duration) arrival {
	a := arrival{got: make(chan answer, 1)}
	at := now()
	go func() {
		d, _ := p.Admit(ctx, at)
		a.got <- answer{d.Allowed, now()}
	}()
	synctest.Wait()
	return a
}

// A slot that frees goes to a critical request before the others, whatever
// their order of arrival.
func TestQueueServesCriticalFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(10, 100*ms))
		require.NoError(t, err)
		ctx := context.Background()
		d, tk := b.Admit(ctx, 0)
		require.True(t, d.Allowed)
		normal := send(ctx, b, now)
		crit := send(sluice.WithPriority(ctx, sluice.PriorityCritical), b, now)
		time.Sleep(ms)
		b.Done(tk, sluice.Success, now(), ms)
		synctest.Wait()
		select {
		case a := <-crit.got:
			assert.True(t, a.allowed)
		default:
			t.Fatal("the critical request was not served first")
		}
		a := <-normal.got
		assert.False(t, a.allowed, "the slot stays taken")
		assert.Equal(t, 100*ms, a.at, "after its full wait")
	})
}

// Once the queue has not been empty for a quarter of its wait, the newest
// request is served first; once it has not been for a whole wait, a
// newcomer waits a quarter of it only, while the early ones keep theirs.
func TestQueueTurnsLIFOThenShortensWaitsWhenItStands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		now := func() time.Duration { return time.Since(epoch) }
		b, err := adaptive.NewBulkhead(1, adaptive.WithQueue(10, 100*ms))
		require.NoError(t, err)
		ctx := context.Background()
		d, tk := b.Admit(ctx, 0)
		require.True(t, d.Allowed)

		first := send(ctx, b, now)
		time.Sleep(30 * ms)
		second := send(ctx, b, now) // the queue has stood 30 ms: newest first
		b.Done(tk, sluice.Success, now(), 30*ms)
		synctest.Wait()
		a := <-second.got
		require.True(t, a.allowed, "the newest is served first")
		assert.Equal(t, 30*ms, a.at)

		time.Sleep(60 * ms)
		fourth := send(ctx, b, now) // at 90 ms: it keeps the queue standing
		time.Sleep(20 * ms)         // 110 ms: the queue has stood longer than a wait
		third := send(ctx, b, now)
		a = <-first.got
		assert.False(t, a.allowed)
		assert.Equal(t, 100*ms, a.at, "the first keeps its whole wait")
		a = <-third.got
		assert.False(t, a.allowed)
		assert.Equal(t, 135*ms, a.at, "a newcomer to a standing queue waits 25 ms")
		a = <-fourth.got
		assert.False(t, a.allowed)
		assert.Equal(t, 190*ms, a.at)
	})
}

func TestOptionsRejectBadInput(t *testing.T) {
	for name, opt := range map[string]adaptive.Option{
		"empty name":         adaptive.WithName(""),
		"negative size":      adaptive.WithQueue(-1, 0),
		"negative wait":      adaptive.WithQueue(1, -ms),
		"a wait but no room": adaptive.WithQueue(0, ms),
	} {
		_, err := adaptive.NewShedder(opt)
		assert.Error(t, err, name)
		_, err = adaptive.NewBulkhead(1, opt)
		assert.Error(t, err, name)
	}
	_, err := adaptive.NewBulkhead(0)
	assert.Error(t, err)
}
