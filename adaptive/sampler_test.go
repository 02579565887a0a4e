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
// on import, and every sampler goroutine stops with its last Stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
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

// TestSystemSamplerTicks runs a started SystemSampler in a synctest bubble:
// each tick folds the cgroup's usage into the average, and Stop stops the
// goroutine (the bubble would not end otherwise).
func TestSystemSamplerTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root, s := fixtureSampler(t)
		s.Start()
		usage := int64(5000000)
		want := 0.0
		for _, used := range []float64{0.5, 1, 1, 0.2} { // fraction of 1.5 cores over each 100 ms
			usage += int64(used * 1.5 * 100000)
			write(t, root, "sys/fs/cgroup/app/web/cpu.stat", "usage_usec "+strconv.FormatInt(usage, 10)+"\n")
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			want = want*0.5 + used*0.5
			assert.InDelta(t, want, s.CPU(), 1e-9)
		}
		assert.InDelta(t, 2.5, s.Load1(), 1e-9)
		s.Stop()
	})
}

// A /proc/loadavg briefly missing (or unreadable) keeps the last Load1, as a
// failed CPU reading keeps the last CPU.
func TestLoadavgBrieflyMissingKeepsTheLastValue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root, s := fixtureSampler(t)
		s.Start()
		defer s.Stop()
		require.InDelta(t, 2.5, s.Load1(), 1e-9)
		require.NoError(t, os.Remove(filepath.Join(root, "proc/loadavg")))
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		assert.InDelta(t, 2.5, s.Load1(), 1e-9, "the last Load1")
	})
}

// A sampler stopped by its last user and started again an hour
// later, on an idle container, starts afresh: it reports nothing of the
// usage measured before the stop.
func TestSamplerRestartedAfterAStopStartsAfresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root, s := fixtureSampler(t)
		s.Start()
		usage := int64(5000000)
		for range 8 { // all of 1.5 cores
			usage += int64(1.5 * 100000)
			write(t, root, "sys/fs/cgroup/app/web/cpu.stat", "usage_usec "+strconv.FormatInt(usage, 10)+"\n")
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
		}
		require.Greater(t, s.CPU(), 0.99)
		s.Stop()

		time.Sleep(time.Hour) // idle: usage does not grow

		s.Start()
		defer s.Stop()
		assert.Less(t, s.CPU(), 0.5, "the CPU of an hour ago")
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		assert.Less(t, s.CPU(), 0.5, "the first reading after the restart")
	})
}
