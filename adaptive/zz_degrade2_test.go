package adaptive

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A process in a cgroup v2 leaf whose cpuset controller is not enabled (no
// cpuset.cpus.effective in the leaf) is confined by its nearest ancestor's
// cpuset, as systemd's AllowedCPUs= on a slice does. The sampler must count
// the ancestor's cores, as it does for cpu.max, not every online core.
func TestZZSamplerUsesAnAncestorsCPUSet(t *testing.T) {
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
