package statelog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/observe/statelog"
)

// lockedBuffer is a bytes.Buffer that a Logger's timer may write to while
// a test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// take returns the records written since the last take.
func (b *lockedBuffer) take(t *testing.T) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	return records(t, &b.buf)
}

// flapping returns a Guard of a breaker that opens at its first failure,
// logged by a Logger of one record at once, then one every every, and a
// function that opens it and closes it again.
func flapping(t *testing.T, every time.Duration) (*lockedBuffer, *sluice.Guard, func(), func()) {
	t.Helper()
	buf := &lockedBuffer{}
	logs, err := statelog.New(slog.New(slog.NewJSONHandler(buf, nil)), statelog.WithLimit(1, every))
	require.NoError(t, err)
	br, err := breaker.New("payments", breaker.WithConsecutiveFailures(1))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(br), sluice.WithObserver(logs))
	require.NoError(t, err)
	open := func() { _ = g.Do(context.Background(), func(context.Context) error { return errors.New("down") }) }
	return buf, g, open, br.Reset
}

// A flap's last change, left out under the limit, is the state the policy
// stays in: it is logged once the next record is allowed, with the count
// of the changes before it that were left out, and nothing after it.
func TestTheLastChangeOfAFlapIsLoggedWhenAllowed(t *testing.T) {
	buf, g, open, closeAgain := flapping(t, 50*time.Millisecond)
	defer g.Close()
	for range 3 {
		open()
		closeAgain()
	}
	got := buf.take(t)
	require.Len(t, got, 1)
	assert.Equal(t, "open", got[0]["to"])

	deadline := time.Now().Add(5 * time.Second)
	for len(got) == 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		got = append(got, buf.take(t)...)
	}
	require.Len(t, got, 2, "the breaker's last state is logged")
	assert.Equal(t, "sluice: circuit breaker closed", got[1]["msg"])
	assert.Equal(t, "closed", got[1]["to"])
	assert.Equal(t, float64(4), got[1]["suppressed"], "the 4 changes between the two records")

	time.Sleep(150 * time.Millisecond)
	assert.Empty(t, buf.take(t), "nothing left to log")
}

// A Guard closed while a change waits for the limit logs it at once: its
// policy's last state is not lost.
func TestClosingLogsTheChangeLeftOut(t *testing.T) {
	buf, g, open, closeAgain := flapping(t, time.Hour)
	open()
	require.Len(t, buf.take(t), 1)
	closeAgain() // left out: one record an hour
	assert.Empty(t, buf.take(t))
	require.NoError(t, g.Close())
	got := buf.take(t)
	require.Len(t, got, 1)
	assert.Equal(t, "closed", got[0]["to"])
	assert.Nil(t, got[0]["suppressed"])
}

// In a breaker group each member's last change is logged: one member's
// change left out does not hide another's.
func TestEachMembersLastChangeIsLogged(t *testing.T) {
	buf := &lockedBuffer{}
	logs, err := statelog.New(slog.New(slog.NewJSONHandler(buf, nil)), statelog.WithLimit(1, 50*time.Millisecond))
	require.NoError(t, err)
	grp, err := breaker.NewGroup("deps", breaker.WithConsecutiveFailures(1))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(grp), sluice.WithObserver(logs))
	require.NoError(t, err)
	defer g.Close()
	fail := func(key string) {
		_ = g.Do(sluice.WithResource(context.Background(), key), func(context.Context) error { return errors.New("down") })
	}
	fail("a") // logged
	fail("b") // left out: b stays open
	a, ok := grp.Get("a")
	require.True(t, ok)
	a.Reset() // left out, and last: a stays closed
	var got []map[string]any
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		got = append(got, buf.take(t)...)
	}
	last := map[string]any{}
	for _, r := range got {
		if m, _ := r["member"].(string); m != "" {
			last[m[strings.LastIndex(m, "/")+1:]] = r["to"]
		}
	}
	assert.Equal(t, map[string]any{"a": "closed", "b": "open"}, last, "the state each member stays in: %v", got)
	for _, r := range got {
		assert.Nil(t, r["suppressed"], "nothing left out for good")
	}
}

// bubbleClock reads the time of a testing/synctest bubble.
type bubbleClock struct{ start time.Time }

func (c bubbleClock) Now() time.Duration { return time.Since(c.start) }

// The members' changes left out are written within the limit too: one a
// token, the others when theirs come.
func TestPendingMembersAreWrittenWithinTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		buf := &lockedBuffer{}
		logs, err := statelog.New(slog.New(slog.NewJSONHandler(buf, nil)),
			statelog.WithLimit(1, time.Second), statelog.WithClock(bubbleClock{time.Now()}))
		require.NoError(t, err)
		grp, err := breaker.NewGroup("deps", breaker.WithConsecutiveFailures(1))
		require.NoError(t, err)
		g, err := sluice.New(sluice.WithName("api"), sluice.With(grp), sluice.WithObserver(logs))
		require.NoError(t, err)
		for i := range 4 {
			_ = g.Do(sluice.WithResource(context.Background(), fmt.Sprint("m", i)),
				func(context.Context) error { return errors.New("down") })
		}
		require.Len(t, buf.take(t), 1, "at once")
		for i := range 3 {
			time.Sleep(time.Second)
			synctest.Wait()
			require.Len(t, buf.take(t), 1, "second %d", i+1)
		}
		require.NoError(t, g.Close())
		assert.Empty(t, buf.take(t), "nothing left")
	})
}
