package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// machineTicks reads the machine's CPU time from /proc/stat: the time the
// hypervisor ran something else while this machine's processors had work
// (steal) and the total, in clock ticks; ok is false where there is no
// such file.
func machineTicks() (steal, total uint64, ok bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0, false
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range fields[1:] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		if i < 8 { // user … steal; guest time is counted in user already
			total += n
		}
		if i == 7 {
			steal = n
		}
	}
	return steal, total, true
}

// stealMeter measures the share of the machine's CPU time stolen by the
// hypervisor over a play: a figure that moves a play's results, shared
// by the load generator and the server alike.
type stealMeter struct {
	steal, total uint64
	ok           bool
}

func startSteal() stealMeter {
	s, t, ok := machineTicks()
	return stealMeter{steal: s, total: t, ok: ok}
}

// percent is the steal since m started, in % of the machine's CPU time;
// -1 when unknown.
func (m stealMeter) percent() float64 {
	s, t, ok := machineTicks()
	if !ok || !m.ok || t <= m.total {
		return -1
	}
	return 100 * float64(s-m.steal) / float64(t-m.total)
}
