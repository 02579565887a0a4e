package adaptive

import (
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

// TestSystemSamplerTicks runs a SystemSampler owned by a Guard in a synctest
// bubble: each tick folds the cgroup's usage into the average, and Close
// stops the goroutine (the bubble would not end otherwise).
func TestSystemSamplerTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := copyTree(t, filepath.Join("testdata", "cgroup2"))
		s, err := NewSystemSampler(SamplerConfig{Root: root, Interval: 100 * time.Millisecond, Decay: 0.5})
		require.NoError(t, err)
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
