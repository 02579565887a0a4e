package adaptive

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// SamplerConfig configures a SystemSampler. The zero value reads the real
// machine every 250 ms with a decay of 0.8.
type SamplerConfig struct {
	// Root is the directory the sampler takes as "/" when it looks for
	// /sys/fs/cgroup, /proc/stat and /proc/loadavg; default "/". Tests point
	// it at fixtures.
	Root string
	// Interval is the time between two readings; default 250 ms, at least
	// 10 ms.
	Interval time.Duration
	// Decay is the weight the smoothed usage keeps at each reading; the new
	// reading weighs 1-Decay. Default 0.8, which follows a step change to 90%
	// in about ten readings (2.5 s at the default interval). It must be in
	// (0, 1); 0 is the default.
	Decay float64
}

// SystemSampler reads the CPU usage of the container the process runs in,
// as a fraction of the CPU it may use: from cgroup v2 (cpu.stat usage_usec
// against cpu.max), else cgroup v1 (cpuacct.usage against
// cpu.cfs_quota_us / cpu.cfs_period_us), else the whole machine's /proc/stat.
// Without a quota, the cores it may use are those of its cpuset, else every
// online core. It also reads the one-minute load average from /proc/loadavg
// where that exists.
//
// The readings are taken by one goroutine, started by the first Start and
// stopped when every Start has been matched by a Stop; readers (CPU, Load1)
// only load an atomic, so what decides by the load (a degrade.Auto switch
// given s.CPU as its signal, a dashboard) may read it on every request.
type SystemSampler struct {
	cfg     SamplerConfig
	src     cpuSource
	loadavg string

	cpu, load atomic.Uint64

	mu       sync.Mutex
	refs     int
	stop     chan struct{}
	done     chan struct{}
	origin   time.Time
	prevBusy float64
	prevCap  float64
	prevAt   time.Time
	primed   bool
	stopped  bool // Stop ended a run: the next Start begins afresh
}

// NewSystemSampler finds the CPU usage source under cfg.Root and takes a
// first reading. It returns an error when the configuration is invalid or no
// source is readable, so that nothing silently runs without CPU readings. It starts no goroutine.
func NewSystemSampler(cfg SamplerConfig) (*SystemSampler, error) {
	if cfg.Root == "" {
		cfg.Root = "/"
	}
	if cfg.Interval == 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.Interval < 10*time.Millisecond {
		return nil, fmt.Errorf("adaptive: SamplerConfig.Interval %v is shorter than 10ms", cfg.Interval)
	}
	if cfg.Decay == 0 {
		cfg.Decay = 0.8
	}
	if math.IsNaN(cfg.Decay) || cfg.Decay < 0 || cfg.Decay >= 1 {
		return nil, fmt.Errorf("adaptive: SamplerConfig.Decay %v is not in [0, 1)", cfg.Decay)
	}
	src, err := detectCPUSource(cfg.Root)
	if err != nil {
		return nil, err
	}
	s := &SystemSampler{cfg: cfg, src: src, origin: time.Now()}
	if p := filepath.Join(cfg.Root, "proc/loadavg"); exists(p) {
		s.loadavg = p
	}
	if err := s.sample(time.Now()); err != nil {
		return nil, err
	}
	return s, nil
}

// source names where the CPU usage is read: "cgroup2", "cgroup1" or
// "procstat".
func (s *SystemSampler) source() string { return s.src.kind() }

// CPU returns the smoothed CPU usage as a fraction of the CPU the process may
// use; 0 until two readings have been taken.
func (s *SystemSampler) CPU() float64 { return math.Float64frombits(s.cpu.Load()) }

// Load1 returns the one-minute load average at the last reading, or 0 where
// /proc/loadavg does not exist.
func (s *SystemSampler) Load1() float64 { return math.Float64frombits(s.load.Load()) }

// sample takes one reading, made at wall instant at, and folds it into the
// smoothed usage.
func (s *SystemSampler) sample(at time.Time) error {
	busy, capacity, wall, err := s.src.read()
	if err != nil {
		return fmt.Errorf("adaptive: reading %s: %w", s.src.kind(), err)
	}
	cores := capacity
	if wall && cores <= 0 {
		return fmt.Errorf("adaptive: %s allows %v cores", s.src.kind(), cores)
	}
	load, loaded := 0.0, false
	if s.loadavg != "" {
		if b, err := os.ReadFile(s.loadavg); err == nil {
			if l, err := parseLoadavg(b); err == nil {
				load, loaded = l, true
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if loaded { // a failed reading keeps the last value, as the CPU's does
		s.load.Store(math.Float64bits(load))
	}
	if wall {
		// Capacity accrues at the number of cores allowed during each
		// interval, so a quota changed in place moves only the intervals
		// after it.
		if s.primed {
			capacity = s.prevCap + float64(at.Sub(s.prevAt))*cores
		} else {
			capacity = float64(at.Sub(s.origin)) * cores
		}
	}
	if s.primed {
		dBusy, dCap := busy-s.prevBusy, capacity-s.prevCap
		if dCap > 0 && dBusy >= 0 {
			u := min(dBusy/dCap, 1)
			prev := math.Float64frombits(s.cpu.Load())
			s.cpu.Store(math.Float64bits(prev*s.cfg.Decay + u*(1-s.cfg.Decay)))
		}
	}
	s.prevBusy, s.prevCap, s.prevAt, s.primed = busy, capacity, at, true
	return nil
}

// Start counts one user of the sampler and starts its goroutine if it is
// not running.
func (s *SystemSampler) Start() {
	s.mu.Lock()
	s.refs++
	if s.refs > 1 {
		s.mu.Unlock()
		return
	}
	// Started again after a stop, it starts afresh, as at construction: the
	// usage smoothed before the stop, and a first interval spanning the
	// whole stop, say nothing of now.
	restart := s.stopped
	if restart {
		s.cpu.Store(0)
		s.primed = false
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.run(s.stop, s.done)
	s.mu.Unlock()
	if restart {
		_ = s.sample(time.Now()) // the new baseline
	}
}

// Stop undoes one Start; the last one stops the goroutine and waits for it
// to end. A Stop without a matching Start does nothing.
func (s *SystemSampler) Stop() {
	s.mu.Lock()
	if s.refs == 0 {
		s.mu.Unlock()
		return
	}
	s.refs--
	if s.refs > 0 {
		s.mu.Unlock()
		return
	}
	stop, done := s.stop, s.done
	s.stop, s.done, s.stopped = nil, nil, true
	s.mu.Unlock()
	close(stop)
	<-done
}

func (s *SystemSampler) run(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			// The instant of the reading is now, not the tick's: a sampler
			// that runs late does so when the CPU is busiest. A failed
			// reading (a file briefly missing) keeps the last value.
			_ = s.sample(time.Now())
		}
	}
}
