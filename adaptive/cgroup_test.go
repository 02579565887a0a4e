package adaptive

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCPUMax(t *testing.T) {
	tests := []struct {
		in            string
		quota, period int64
		err           bool
	}{
		{in: "150000 100000\n", quota: 150000, period: 100000},
		{in: "max 100000\n", quota: -1, period: 100000},
		{in: "max\n", quota: -1, period: 100000},
		{in: "50000 50000", quota: 50000, period: 50000},
		{in: "", err: true},
		{in: "0 100000", err: true},
		{in: "abc 100000", err: true},
		{in: "max 0", err: true},
		{in: "1 2 3", err: true},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSpace(tt.in), func(t *testing.T) {
			q, p, err := parseCPUMax([]byte(tt.in))
			if tt.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.quota, q)
			assert.Equal(t, tt.period, p)
		})
	}
}

func TestParseCPUStatUsage(t *testing.T) {
	v, err := parseCPUStatUsage([]byte("user_usec 3\nusage_usec 42\nsystem_usec 1\n"))
	require.NoError(t, err)
	assert.Equal(t, int64(42), v)
	_, err = parseCPUStatUsage([]byte("user_usec 3\n"))
	require.Error(t, err)
	_, err = parseCPUStatUsage([]byte("usage_usec -4\n"))
	require.Error(t, err)
}

func TestParseProcStat(t *testing.T) {
	busy, total, n, err := parseProcStat([]byte("cpu  10 1 5 80 4 0 0 0 7 0\ncpu0 10 1 5 80 4 0 0 0 7 0\nintr 5\n"))
	require.NoError(t, err)
	assert.Equal(t, uint64(16), busy, "user+nice+system+irq+softirq+steal; guest is already in user")
	assert.Equal(t, uint64(100), total)
	assert.Equal(t, 1, n)
	_, _, _, err = parseProcStat([]byte("intr 5\n"))
	require.Error(t, err)
	_, _, _, err = parseProcStat([]byte("cpu 1 x 3 4\n"))
	require.Error(t, err)
}

func TestParseLoadavgAndCPUSet(t *testing.T) {
	l, err := parseLoadavg([]byte("2.50 1.75 1.00 3/200 4242\n"))
	require.NoError(t, err)
	assert.InDelta(t, 2.5, l, 1e-9)
	_, err = parseLoadavg(nil)
	require.Error(t, err)
	_, err = parseLoadavg([]byte("x"))
	require.Error(t, err)

	for in, want := range map[string]int{"0": 1, "0-3": 4, "0-1,3": 3, "0-3,8,10-11\n": 7} {
		n, err := parseCPUSet(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, n, in)
	}
	for _, in := range []string{"", "3-1", "a", "1-b"} {
		_, err := parseCPUSet(in)
		require.Error(t, err, in)
	}
}

func TestParseProcCgroup(t *testing.T) {
	v2, v1 := parseProcCgroup([]byte("12:cpu,cpuacct:/docker/x\n3:cpuset:/docker/y\n0::/app\n"))
	assert.Equal(t, "/app", v2)
	assert.Equal(t, map[string]string{"cpu": "/docker/x", "cpuacct": "/docker/x", "cpuset": "/docker/y"}, v1)
}

// copyTree copies the fixture dir into a temporary directory, so a test can
// rewrite the usage counters between two readings.
func copyTree(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	require.NoError(t, err)
	return dst
}

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(root, rel), []byte(content), 0o644))
}

// TestSamplerFixtures reads each fixture tree twice, one second apart, and
// checks the source found, the cores allowed and the usage as a fraction of
// them.
func TestSamplerFixtures(t *testing.T) {
	tests := []struct {
		fixture string
		source  string
		cores   float64 // for cgroup sources
		usage   string  // file rewritten for the second reading
		second  string  // its content
		idle    string  // its content after an idle second; default second
		want    float64 // fraction used between the readings
		load1   float64
	}{
		{
			// 0.75 s of CPU in 1 s against the ancestor's 1.5-core quota.
			fixture: "cgroup2", source: "cgroup2", cores: 1.5,
			usage: "sys/fs/cgroup/app/web/cpu.stat", second: "usage_usec 5750000\n",
			want: 0.5, load1: 2.5,
		},
		{
			// "max": no quota, so the cpuset's 2 cores; 1.5 s in 1 s.
			fixture: "cgroup2-max", source: "cgroup2", cores: 2,
			usage: "sys/fs/cgroup/cpu.stat", second: "usage_usec 2500000\n",
			want: 0.75,
		},
		{
			// 50000/100000 µs: half a core; 0.25 s in 1 s.
			fixture: "cgroup1", source: "cgroup1", cores: 0.5,
			usage: "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpuacct.usage", second: "2250000000\n",
			want: 0.5,
		},
		{
			// quota -1: the cpuset's 3 cores; 0.6 s in 1 s.
			fixture: "cgroup1-unlimited", source: "cgroup1", cores: 3,
			usage: "sys/fs/cgroup/cpuacct/cpuacct.usage", second: "7600000000\n",
			want: 0.2,
		},
		{
			// /proc/stat: 300 busy jiffies out of 400.
			fixture: "host", source: "procstat",
			usage: "proc/stat", second: "cpu  1200 0 600 8080 120 0 0 0 0 0\n",
			idle: "cpu  1200 0 600 8480 120 0 0 0 0 0\n",
			want: 0.75, load1: 0.42,
		},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			root := copyTree(t, filepath.Join("testdata", tt.fixture))
			s, err := NewSystemSampler(SamplerConfig{Root: root, Decay: 0.5})
			require.NoError(t, err)
			assert.Equal(t, tt.source, s.source())
			if tt.cores > 0 {
				_, cores, wall, err := s.src.read()
				require.NoError(t, err)
				require.True(t, wall)
				assert.InDelta(t, tt.cores, cores, 1e-9)
			}
			assert.InDelta(t, tt.load1, s.Load1(), 1e-9)
			assert.Zero(t, s.CPU(), "one reading gives no usage yet")

			t0 := s.origin.Add(time.Hour)
			require.NoError(t, s.sample(t0))
			write(t, root, tt.usage, tt.second)
			require.NoError(t, s.sample(t0.Add(time.Second)))
			// Decay 0.5 from 0: half of the reading.
			assert.InDelta(t, tt.want/2, s.CPU(), 1e-9)
			// A second identical interval moves it halfway again.
			idle := tt.idle
			if idle == "" {
				idle = tt.second // unchanged usage over a wall second
			}
			write(t, root, tt.usage, idle)
			require.NoError(t, s.sample(t0.Add(2*time.Second)))
			assert.InDelta(t, tt.want/4, s.CPU(), 1e-9)
		})
	}
}

func TestSamplerNoSource(t *testing.T) {
	_, err := NewSystemSampler(SamplerConfig{Root: t.TempDir()})
	require.ErrorIs(t, err, errNoCPUSource)
	assert.Contains(t, err.Error(), "no CPU usage source")
}

func TestSamplerConfigValidation(t *testing.T) {
	root := filepath.Join("testdata", "host")
	for _, cfg := range []SamplerConfig{
		{Root: root, Interval: time.Millisecond},
		{Root: root, Decay: 1},
		{Root: root, Decay: -0.1},
	} {
		_, err := NewSystemSampler(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}

func TestSamplerMalformedQuota(t *testing.T) {
	root := copyTree(t, filepath.Join("testdata", "cgroup2"))
	write(t, root, "sys/fs/cgroup/app/cpu.max", "lots 100000\n")
	_, err := NewSystemSampler(SamplerConfig{Root: root})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cpu.max")
}

func TestSystemSamplerRealMachine(t *testing.T) {
	// The machine running the tests has one of the sources or none; either
	// way construction answers clearly and a reading is a fraction.
	s, err := NewSystemSampler(SamplerConfig{})
	if err != nil {
		require.ErrorIs(t, err, errNoCPUSource)
		return
	}
	require.NoError(t, s.sample(time.Now().Add(time.Second)))
	assert.GreaterOrEqual(t, s.CPU(), 0.0)
	assert.LessOrEqual(t, s.CPU(), 1.0)
}

// A quota changed in place between two readings moves only the interval
// after the change: the reading is the share of the new quota used.
func TestSamplerQuotaChangedInPlace(t *testing.T) {
	root := copyTree(t, filepath.Join("testdata", "cgroup2-max"))
	write(t, root, "sys/fs/cgroup/cpu.max", "200000 100000\n") // 2 cores
	s, err := NewSystemSampler(SamplerConfig{Root: root, Decay: 0.5})
	require.NoError(t, err)
	t0 := s.origin.Add(time.Hour)
	require.NoError(t, s.sample(t0))
	write(t, root, "sys/fs/cgroup/cpu.max", "100000 100000\n") // resized to 1 core
	write(t, root, "sys/fs/cgroup/cpu.stat", "usage_usec 1500000\n")
	require.NoError(t, s.sample(t0.Add(time.Second)))
	// 0.5 s of CPU in 1 s against 1 core: 50%, smoothed by half from 0.
	assert.InDelta(t, 0.25, s.CPU(), 1e-9)
}

// A process in a cgroup v2 leaf whose cpuset controller is not enabled (no
// cpuset.cpus.effective in the leaf) is confined by its nearest ancestor's
// cpuset, as systemd's AllowedCPUs= on a slice does: the sampler counts the
// ancestor's cores, as it does for cpu.max, not every online core.
func TestTheSamplerReadsAnAncestorsCPUSet(t *testing.T) {
	root := t.TempDir()
	mk := func(rel, content string) {
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	mk("proc/self/cgroup", "0::/pinned.slice/app.service\n")
	mk("proc/stat", "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 1 0 1 1 0 0 0 0 0 0\ncpu2 1 0 1 1 0 0 0 0 0 0\ncpu3 1 0 1 1 0 0 0 0 0 0\ncpu4 1 0 1 1 0 0 0 0 0 0\ncpu5 1 0 1 1 0 0 0 0 0 0\ncpu6 1 0 1 1 0 0 0 0 0 0\ncpu7 1 0 1 1 0 0 0 0 0 0\n")
	mk("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
	mk("sys/fs/cgroup/cpuset.cpus.effective", "0-7\n")
	mk("sys/fs/cgroup/pinned.slice/cpuset.cpus.effective", "2-3\n") // AllowedCPUs=2-3
	mk("sys/fs/cgroup/pinned.slice/cpu.stat", "usage_usec 1000\n")
	mk("sys/fs/cgroup/pinned.slice/app.service/cpu.stat", "usage_usec 1000\n")
	mk("sys/fs/cgroup/pinned.slice/app.service/cpu.max", "max 100000\n")

	s, err := NewSystemSampler(SamplerConfig{Root: root})
	require.NoError(t, err)
	require.Equal(t, "cgroup2", s.source())
	_, cores, wall, err := s.src.read()
	require.NoError(t, err)
	require.True(t, wall)
	require.InDelta(t, 2.0, cores, 1e-9, "the process may use the 2 cores of its slice's cpuset, not all 8")
}
