package adaptive

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// errNoCPUSource is returned when none of the files a SystemSampler reads
// exists under its root.
var errNoCPUSource = errors.New("adaptive: no CPU usage source: none of cgroup v2 cpu.stat, cgroup v1 cpuacct.usage or /proc/stat is readable")

// cpuSource reads cumulative CPU use and cumulative capacity in the same
// unit, so that the ratio of two readings' differences is the usage as a
// fraction of what the process may use.
type cpuSource interface {
	// read returns the cumulative busy time and, when wall is true, the
	// number of cores the process may use (the capacity is then elapsed wall
	// time × cores); otherwise the cumulative capacity in the busy unit.
	read() (busy float64, capacity float64, wall bool, err error)
	kind() string
}

// cgroupV2 reads cpu.stat's usage_usec and cpu.max of a cgroup v2
// directory, with the tightest cpu.max of its ancestors.
type cgroupV2 struct {
	root  string   // file-system root
	dirs  []string // the process's cgroup directory, then its ancestors up to the mount
	ncpus float64  // cores when no quota is set
}

func (c *cgroupV2) kind() string { return "cgroup2" }

func (c *cgroupV2) read() (float64, float64, bool, error) {
	b, err := os.ReadFile(filepath.Join(c.root, c.dirs[0], "cpu.stat"))
	if err != nil {
		return 0, 0, false, err
	}
	usec, err := parseCPUStatUsage(b)
	if err != nil {
		return 0, 0, false, err
	}
	cores := c.ncpus
	for _, d := range c.dirs {
		b, err := os.ReadFile(filepath.Join(c.root, d, "cpu.max"))
		if err != nil {
			continue
		}
		quota, period, err := parseCPUMax(b)
		if err != nil {
			return 0, 0, false, err
		}
		if quota > 0 && period > 0 {
			cores = min(cores, float64(quota)/float64(period))
		}
	}
	return float64(usec) * 1e3, cores, true, nil
}

// cgroupV1 reads cpuacct.usage and cpu.cfs_quota_us / cpu.cfs_period_us.
type cgroupV1 struct {
	usage  string // path of cpuacct.usage
	cpuDir string // directory of cpu.cfs_*; "" when absent
	ncpus  float64
}

func (c *cgroupV1) kind() string { return "cgroup1" }

func (c *cgroupV1) read() (float64, float64, bool, error) {
	b, err := os.ReadFile(c.usage)
	if err != nil {
		return 0, 0, false, err
	}
	ns, err := parseInt(b)
	if err != nil {
		return 0, 0, false, fmt.Errorf("adaptive: %s: %w", c.usage, err)
	}
	cores := c.ncpus
	if c.cpuDir != "" {
		quota, period, err := readCFS(c.cpuDir)
		if err != nil {
			return 0, 0, false, err
		}
		if quota > 0 && period > 0 {
			cores = min(cores, float64(quota)/float64(period))
		}
	}
	return float64(ns), cores, true, nil
}

func readCFS(dir string) (quota, period int64, err error) {
	q, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	if err != nil {
		return 0, 0, err
	}
	p, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return 0, 0, err
	}
	if quota, err = parseInt(q); err != nil {
		return 0, 0, fmt.Errorf("adaptive: cpu.cfs_quota_us: %w", err)
	}
	if period, err = parseInt(p); err != nil {
		return 0, 0, fmt.Errorf("adaptive: cpu.cfs_period_us: %w", err)
	}
	return quota, period, nil
}

// procStat reads the aggregate "cpu" line of /proc/stat: the whole machine.
type procStat struct{ path string }

func (p *procStat) kind() string { return "procstat" }

func (p *procStat) read() (float64, float64, bool, error) {
	b, err := os.ReadFile(p.path)
	if err != nil {
		return 0, 0, false, err
	}
	busy, total, _, err := parseProcStat(b)
	if err != nil {
		return 0, 0, false, err
	}
	return float64(busy), float64(total), false, nil
}

// detectCPUSource finds, under root, the most specific source of CPU usage:
// cgroup v2, then cgroup v1, then /proc/stat.
func detectCPUSource(root string) (cpuSource, error) {
	ncpus := onlineCPUs(root)
	v2path, v1paths := "/", map[string]string{}
	if b, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup")); err == nil {
		v2path, v1paths = parseProcCgroup(b)
	}
	const mount = "/sys/fs/cgroup"
	if exists(filepath.Join(root, mount, "cgroup.controllers")) {
		var dirs []string
		for p := path.Clean(v2path); ; p = path.Dir(p) {
			dirs = append(dirs, path.Join(mount, p))
			if p == "/" || p == "." {
				break
			}
		}
		// Inside a cgroup namespace the mount is the process's own cgroup
		// and the path from /proc/self/cgroup does not exist under it.
		for len(dirs) > 1 && !exists(filepath.Join(root, dirs[0], "cpu.stat")) {
			dirs = dirs[1:]
		}
		if exists(filepath.Join(root, dirs[0], "cpu.stat")) {
			// The cpuset of its own cgroup, or, where the controller is not
			// enabled for it (systemd's AllowedCPUs= on a slice enables it
			// for the slice only), of the nearest ancestor that has one.
			for _, d := range dirs {
				if set := readCPUSet(filepath.Join(root, d, "cpuset.cpus.effective")); set > 0 {
					ncpus = min(ncpus, set)
					break
				}
			}
			return &cgroupV2{root: root, dirs: dirs, ncpus: ncpus}, nil
		}
	}
	for _, dir := range []string{"cpuacct", "cpu,cpuacct", "cpuacct,cpu"} {
		base := filepath.Join(root, mount, dir)
		usage := ""
		for _, p := range []string{filepath.Join(base, v1paths["cpuacct"]), base} {
			if exists(filepath.Join(p, "cpuacct.usage")) {
				usage = filepath.Join(p, "cpuacct.usage")
				break
			}
		}
		if usage == "" {
			continue
		}
		src := &cgroupV1{usage: usage, ncpus: ncpus}
		for _, cdir := range []string{"cpu", "cpu,cpuacct", "cpuacct,cpu"} {
			cbase := filepath.Join(root, mount, cdir)
			for _, p := range []string{filepath.Join(cbase, v1paths["cpu"]), cbase} {
				if exists(filepath.Join(p, "cpu.cfs_quota_us")) {
					src.cpuDir = p
					break
				}
			}
			if src.cpuDir != "" {
				break
			}
		}
		cs := filepath.Join(root, mount, "cpuset")
		for _, p := range []string{filepath.Join(cs, v1paths["cpuset"]), cs} {
			if set := readCPUSet(filepath.Join(p, "cpuset.effective_cpus")); set > 0 {
				src.ncpus = min(src.ncpus, set)
				break
			}
		}
		return src, nil
	}
	if exists(filepath.Join(root, "proc/stat")) {
		return &procStat{path: filepath.Join(root, "proc/stat")}, nil
	}
	return nil, errNoCPUSource
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}

// onlineCPUs counts the cpuN lines of root's /proc/stat, or asks the runtime.
func onlineCPUs(root string) float64 {
	if b, err := os.ReadFile(filepath.Join(root, "proc/stat")); err == nil {
		if _, _, n, err := parseProcStat(b); err == nil && n > 0 {
			return float64(n)
		}
	}
	return float64(runtime.NumCPU())
}

func readCPUSet(p string) float64 {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	n, err := parseCPUSet(string(b))
	if err != nil {
		return 0
	}
	return float64(n)
}

// parseCPUMax parses cgroup v2 cpu.max: "$QUOTA $PERIOD", where QUOTA is
// "max" for no limit (returned as -1). A lone "max" has the default period
// of 100000 µs.
func parseCPUMax(b []byte) (quota, period int64, err error) {
	f := strings.Fields(string(b))
	if len(f) == 0 || len(f) > 2 {
		return 0, 0, fmt.Errorf("adaptive: cpu.max: malformed %q", b)
	}
	period = 100000
	if len(f) == 2 {
		if period, err = strconv.ParseInt(f[1], 10, 64); err != nil || period <= 0 {
			return 0, 0, fmt.Errorf("adaptive: cpu.max: bad period %q", f[1])
		}
	}
	if f[0] == "max" {
		return -1, period, nil
	}
	if quota, err = strconv.ParseInt(f[0], 10, 64); err != nil || quota <= 0 {
		return 0, 0, fmt.Errorf("adaptive: cpu.max: bad quota %q", f[0])
	}
	return quota, period, nil
}

// parseCPUStatUsage returns usage_usec from cgroup v2 cpu.stat.
func parseCPUStatUsage(b []byte) (int64, error) {
	for line := range bytes.Lines(b) {
		f := strings.Fields(string(line))
		if len(f) == 2 && f[0] == "usage_usec" {
			v, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || v < 0 {
				return 0, fmt.Errorf("adaptive: cpu.stat: bad usage_usec %q", f[1])
			}
			return v, nil
		}
	}
	return 0, errors.New("adaptive: cpu.stat: no usage_usec line")
}

// parseInt parses a file holding one integer (cgroup v1 files).
func parseInt(b []byte) (int64, error) {
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// parseProcStat parses /proc/stat: busy and total jiffies of the aggregate
// "cpu" line (idle and iowait are not busy; guest time is already counted in
// user), and the number of cpuN lines.
func parseProcStat(b []byte) (busy, total uint64, ncpu int, err error) {
	found := false
	for line := range bytes.Lines(b) {
		f := strings.Fields(string(line))
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			ncpu++
			continue
		}
		if len(f) < 5 {
			return 0, 0, 0, fmt.Errorf("adaptive: /proc/stat: short cpu line %q", line)
		}
		// user nice system idle iowait irq softirq steal [guest guest_nice]
		for i, s := range f[1:min(len(f), 9)] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return 0, 0, 0, fmt.Errorf("adaptive: /proc/stat: bad field %q", s)
			}
			total += v
			if i != 3 && i != 4 {
				busy += v
			}
		}
		found = true
	}
	if !found {
		return 0, 0, 0, errors.New("adaptive: /proc/stat: no cpu line")
	}
	return busy, total, ncpu, nil
}

// parseLoadavg returns the one-minute load average of /proc/loadavg.
func parseLoadavg(b []byte) (float64, error) {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("adaptive: /proc/loadavg: empty")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("adaptive: /proc/loadavg: bad load %q", f[0])
	}
	return v, nil
}

// parseCPUSet counts the CPUs of a cpuset list such as "0-3,8,10-11".
func parseCPUSet(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("adaptive: empty cpuset")
	}
	n := 0
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0, fmt.Errorf("adaptive: bad cpuset %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("adaptive: bad cpuset %q", s)
			}
		}
		n += b - a + 1
	}
	return n, nil
}

// parseProcCgroup parses /proc/self/cgroup: the cgroup v2 path ("0::/x")
// and the cgroup v1 path of each controller ("4:cpu,cpuacct:/x").
func parseProcCgroup(b []byte) (v2 string, v1 map[string]string) {
	v2, v1 = "/", map[string]string{}
	for line := range bytes.Lines(b) {
		f := strings.SplitN(strings.TrimSpace(string(line)), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2 = f[2]
			continue
		}
		for c := range strings.SplitSeq(f[1], ",") {
			v1[c] = f[2]
		}
	}
	return v2, v1
}
