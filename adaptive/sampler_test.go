package adaptive

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: nothing starts
// on import, and every sampler goroutine stops with its last Guard.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// useSharedConfig points the process-wide sampler at cfg for one test.
func useSharedConfig(t *testing.T, cfg SamplerConfig) {
	t.Helper()
	sharedMu.Lock()
	require.Nil(t, shared, "the process-wide sampler is already made")
	sharedCfg = cfg
	sharedMu.Unlock()
	t.Cleanup(func() {
		sharedMu.Lock()
		shared, sharedCfg = nil, SamplerConfig{}
		sharedMu.Unlock()
	})
}

func running(g *Guard) bool {
	s := g.sampler.(*SystemSampler)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done != nil
}

// TestSharedSamplerRefCount checks that the process-wide sampler starts with
// the first Guard that needs it, is shared, and stops when the last one is
// closed, and starts again for a later Guard.
func TestSharedSamplerRefCount(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	goleak.VerifyNone(t, ignore) // nothing runs before a Guard
	useSharedConfig(t, SamplerConfig{Root: filepath.Join("testdata", "host"), Interval: 10 * time.Millisecond})

	g1, err := NewGuard()
	require.NoError(t, err)
	g2, err := NewGuard(WithCPUThreshold(0.9))
	require.NoError(t, err)
	require.Same(t, g1.sampler, g2.sampler, "one sampler per process")
	require.True(t, running(g1), "the sampler goroutine runs")

	require.NoError(t, g1.Close())
	require.NoError(t, g1.Close(), "closing twice releases once")
	require.True(t, running(g2), "still used by g2")
	require.NoError(t, g2.Close())
	goleak.VerifyNone(t, ignore)

	g3, err := NewGuard()
	require.NoError(t, err)
	require.True(t, running(g3), "restarted for a new Guard")
	require.NoError(t, g3.Close())
	goleak.VerifyNone(t, ignore)
}

func TestSharedSamplerNoSourceFailsConstruction(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	useSharedConfig(t, SamplerConfig{Root: t.TempDir()})
	_, err := NewGuard()
	require.ErrorIs(t, err, errNoCPUSource)
	assert.Contains(t, err.Error(), "WithSampler")
	goleak.VerifyNone(t, ignore)
}

// fixtureSampler copies the cgroup v2 fixture and returns its root and a
// sampler of it that reads every 100 ms and halves the weight of the past.
func fixtureSampler(t *testing.T) (string, *SystemSampler) {
	t.Helper()
	root := copyTree(t, filepath.Join("testdata", "cgroup2"))
	s, err := NewSystemSampler(SamplerConfig{Root: root, Interval: 100 * time.Millisecond, Decay: 0.5})
	require.NoError(t, err)
	return root, s
}

// TestSystemSamplerTicks runs a SystemSampler owned by a Guard in a synctest
// bubble: each tick folds the cgroup's usage into the average, and Close
// stops the goroutine (the bubble would not end otherwise).
func TestSystemSamplerTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root, s := fixtureSampler(t)
		g, err := NewGuard(WithSampler(s))
		require.NoError(t, err)
		usage := int64(5000000)
		want := 0.0
		for _, used := range []float64{0.5, 1, 1, 0.2} { // fraction of 1.5 cores over each 100 ms
			usage += int64(used * 1.5 * 100000)
			write(t, root, "sys/fs/cgroup/app/web/cpu.stat", "usage_usec "+strconv.FormatInt(usage, 10)+"\n")
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			want = want*0.5 + used*0.5
			assert.InDelta(t, want, g.Stats().CPU, 1e-9)
		}
		assert.InDelta(t, 2.5, g.Stats().Load1, 1e-9)
		require.NoError(t, g.Close())
	})
}

// A /proc/loadavg briefly missing (or unreadable) keeps the last Load1, as a
// failed CPU reading keeps the last CPU: WithMaxLoad1 goes on shedding.
func TestLoadavgBrieflyMissingKeepsTheLastValue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root, s := fixtureSampler(t)
		g, err := NewGuard(WithSampler(s), WithMaxLoad1(2))
		require.NoError(t, err)
		defer g.Close()
		require.InDelta(t, 2.5, g.Stats().Load1, 1e-9)
		require.NoError(t, os.Remove(filepath.Join(root, "proc/loadavg")))
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		assert.InDelta(t, 2.5, g.Stats().Load1, 1e-9, "the last Load1")
	})
}

// A sampler stopped when its last Guard closed and started again an hour
// later, on an idle container, starts afresh: it reports nothing of the
// usage measured before the stop.
func TestSamplerRestartedAfterAStopStartsAfresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root, s := fixtureSampler(t)
		g1, err := NewGuard(WithSampler(s))
		require.NoError(t, err)
		usage := int64(5000000)
		for range 8 { // all of 1.5 cores
			usage += int64(1.5 * 100000)
			write(t, root, "sys/fs/cgroup/app/web/cpu.stat", "usage_usec "+strconv.FormatInt(usage, 10)+"\n")
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
		}
		require.Greater(t, g1.Stats().CPU, 0.99)
		require.NoError(t, g1.Close())

		time.Sleep(time.Hour) // idle: usage does not grow

		g2, err := NewGuard(WithSampler(s))
		require.NoError(t, err)
		defer g2.Close()
		assert.Less(t, g2.Stats().CPU, 0.5, "the CPU of an hour ago")
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		assert.Less(t, g2.Stats().CPU, 0.5, "the first reading after the restart")
	})
}
