package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// median of xs; the mean of the middle two for an even count.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func levelName(x float64) string {
	return strconv.FormatFloat(x, 'f', -1, 64) + "×"
}

// medians of one library at one level over the runs.
func medians(runs []levelStats) levelStats {
	var g, p, r []float64
	for _, s := range runs {
		g, r = append(g, s.goodput), append(r, s.rejected)
		if s.p99 >= 0 {
			p = append(p, s.p99)
		}
	}
	m := levelStats{goodput: median(g), p99: -1, rejected: median(r)}
	if len(p) > 0 {
		m.p99 = median(p)
	}
	return m
}

var scenarioTitle = map[string]string{
	"cpu":  "CPU-bound surge: about 4 ms of CPU a request",
	"pool": "Pool-bound surge: one of 16 connections held 20 ms a request",
}

func (rep *report) markdown(w io.Writer) {
	cfg := rep.cfg
	for _, sc := range []string{"cpu", "pool"} {
		libs := rep.shed[sc]
		if libs == nil {
			continue
		}
		fmt.Fprintf(w, "### %s (capacity %.0f requests/s)\n\n", scenarioTitle[sc], rep.capacity[sc])
		fmt.Fprintf(w, "Goodput %% of capacity · p99 of admitted requests (ms) · %% rejected, median of %d run(s).\n\n", cfg.runs)
		head := []string{"library"}
		for _, l := range cfg.levels {
			head = append(head, levelName(l))
		}
		row(w, head...)
		row(w, slices.Repeat([]string{"---"}, len(head))...)
		for _, lib := range shedLibs {
			per, ok := libs[lib.name]
			if !ok {
				continue
			}
			cells := []string{lib.label}
			for li := range cfg.levels {
				m := medians(per[li])
				p99 := "–"
				if m.p99 >= 0 {
					p99 = fmt.Sprintf("%.0f", m.p99)
				}
				cells = append(cells, fmt.Sprintf("%.0f · %s · %.0f", m.goodput, p99, m.rejected))
			}
			row(w, cells...)
		}
		fmt.Fprintln(w)
	}
	if len(rep.dep) > 0 {
		fmt.Fprintf(w, "### Slow dependency: %.0f requests/s on each of two routes, 16 shared connections; "+
			"sick (2 s, 25 %% failures) for %g s, then healed\n\n", cfg.depRate, cfg.depSick.Seconds())
		fmt.Fprintf(w, "Median of %d run(s).\n\n", cfg.runs)
		row(w, "library", "open after (ms)", "calls into the sick dependency", "% answered from fallback", "recovered after healing (ms)")
		row(w, "---", "---:", "---:", "---:", "---:")
		for _, lib := range breakerLibs {
			runs, ok := rep.dep[lib.name]
			if !ok {
				continue
			}
			var open, calls, fb, rec []float64
			for _, d := range runs {
				open, calls, fb, rec = append(open, d.openMs), append(calls, d.sickCalls), append(fb, d.fallback), append(rec, d.recoverMs)
			}
			row(w, lib.label, orNever(open, "never"), fmt.Sprintf("%.0f", median(calls)),
				fmt.Sprintf("%.0f", median(fb)), orNever(rec, "not within the run"))
		}
		fmt.Fprintln(w)
	}
	for _, sc := range []string{"cpu", "pool", "dep"} {
		if c := rep.genCPU[sc]; len(c) > 0 {
			fmt.Fprintf(w, "Load generator's own CPU in the %s scenario: %.2f cores median, %.2f at most (%d plays).\n",
				sc, median(c), slices.Max(c), len(c))
		}
	}
	for _, sc := range []string{"cpu", "pool", "dep"} {
		if s := rep.steal[sc]; len(s) > 0 {
			fmt.Fprintf(w, "CPU time the hypervisor took from this machine in the %s scenario (steal): %.1f%% median, %.1f%% at most (%d plays).\n",
				sc, median(s), slices.Max(s), len(s))
		}
	}
}

// orNever is the median of xs, where -1 means the event did not happen; if
// it did not happen in most runs, the median is word.
func orNever(xs []float64, word string) string {
	var seen []float64
	for _, x := range xs {
		if x >= 0 {
			seen = append(seen, x)
		}
	}
	switch {
	case len(seen)*2 < len(xs) || len(seen) == 0:
		return word
	case len(seen) < len(xs):
		// The median of the runs that saw it: one of -1 (never) would
		// average a figure no run measured.
		return fmt.Sprintf("%.0f (%s in %d of %d runs)", median(seen), word, len(xs)-len(seen), len(xs))
	}
	return fmt.Sprintf("%.0f", median(seen))
}

func row(w io.Writer, cells ...string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}
