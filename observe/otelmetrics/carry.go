package otelmetrics

import (
	"cmp"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// carried are the final counters and histograms of the Guards that a
// watch succeeds: Guards of its name closed before it was attached, as a
// rules reload closes a Guard it rebuilds. The watch adds them to its own,
// so that its series go on from where theirs stopped instead of starting
// again from zero.
type carried struct {
	ints  map[pointKey]metricdata.DataPoint[int64]
	hists map[pointKey]metricdata.HistogramDataPoint[float64]
}

// pointKey tells one series from another: its instrument and attributes.
type pointKey struct {
	in    instrument
	attrs attribute.Distinct
}

// freeze returns the counters and histograms of b, the points of one
// series summed (two policies of one name report one series twice).
func freeze(b *builder) *carried {
	c := &carried{ints: map[pointKey]metricdata.DataPoint[int64]{}, hists: map[pointKey]metricdata.HistogramDataPoint[float64]{}}
	for in, d := range instruments {
		switch d.kind {
		case kindCounter:
			for _, p := range b.ints[in] {
				k := pointKey{instrument(in), p.Attributes.Equivalent()}
				if q, ok := c.ints[k]; ok {
					p.Value += q.Value
				}
				c.ints[k] = p
			}
		case kindHistogram:
			for _, p := range b.hists[in] {
				k := pointKey{instrument(in), p.Attributes.Equivalent()}
				if q, ok := c.hists[k]; ok {
					p.BucketCounts = slices.Clone(p.BucketCounts)
					addHistogram(&p, &q)
				}
				c.hists[k] = p
			}
		}
	}
	return c
}

// addHistogram adds q's counts to p's.
func addHistogram(p, q *metricdata.HistogramDataPoint[float64]) {
	for j := range p.BucketCounts {
		p.BucketCounts[j] += q.BucketCounts[j]
	}
	p.Count += q.Count
	p.Sum += q.Sum
}

// addTo adds c's counts to the points of b of the same series, and adds a
// point for each series of c that b lacks.
func (c *carried) addTo(b *builder) {
	if c == nil {
		return
	}
	seen := make(map[pointKey]bool, len(c.ints)+len(c.hists))
	for in := range instruments {
		for i := range b.ints[in] {
			p := &b.ints[in][i]
			k := pointKey{instrument(in), p.Attributes.Equivalent()}
			if q, ok := c.ints[k]; ok && !seen[k] { // once a series
				p.Value += q.Value
				p.StartTime = q.StartTime
				seen[k] = true
			}
		}
		for i := range b.hists[in] {
			p := &b.hists[in][i]
			k := pointKey{instrument(in), p.Attributes.Equivalent()}
			if q, ok := c.hists[k]; ok && !seen[k] {
				addHistogram(p, &q)
				p.StartTime = q.StartTime
				seen[k] = true
			}
		}
	}
	// The series only the old Guards had (a policy the successor lacks)
	// keep their last values, in a fixed order.
	for _, k := range missing(c.ints, seen, func(p metricdata.DataPoint[int64]) attribute.Set { return p.Attributes }) {
		p := c.ints[k]
		p.Time = b.now
		b.ints[k.in] = append(b.ints[k.in], p)
	}
	for _, k := range missing(c.hists, seen, func(p metricdata.HistogramDataPoint[float64]) attribute.Set { return p.Attributes }) {
		p := c.hists[k]
		p.Time = b.now
		p.Bounds = slices.Clone(p.Bounds)
		p.BucketCounts = slices.Clone(p.BucketCounts)
		b.hists[k.in] = append(b.hists[k.in], p)
	}
}

// missing returns the keys of m that seen lacks, by instrument and then by
// attributes.
func missing[P any](m map[pointKey]P, seen map[pointKey]bool, attrs func(P) attribute.Set) []pointKey {
	var ks []pointKey
	enc := map[pointKey]string{}
	for k, p := range m {
		if !seen[k] {
			ks = append(ks, k)
			set := attrs(p)
			enc[k] = set.Encoded(attribute.DefaultEncoder())
		}
	}
	slices.SortFunc(ks, func(a, b pointKey) int {
		return cmp.Or(cmp.Compare(a.in, b.in), cmp.Compare(enc[a], enc[b]))
	})
	return ks
}

// add appends the points of o to b's.
func (b *builder) add(o *builder) {
	for in := range instruments {
		b.ints[in] = append(b.ints[in], o.ints[in]...)
		b.floats[in] = append(b.floats[in], o.floats[in]...)
		b.hists[in] = append(b.hists[in], o.hists[in]...)
	}
}

// countsOnly drops b's gauges: a closed Guard's state is gone.
func (b *builder) countsOnly() {
	for in, d := range instruments {
		if d.kind == kindGauge || d.kind == kindRatio {
			b.ints[in], b.floats[in] = nil, nil
		}
	}
}

// gather returns w's points at now: its Guard's, while it has one, with
// the counts it carries from its predecessors added. A gather after w
// succeeded a Guard reads that Guard's counts, which go on while its last
// calls end, and keeps them once they have.
func (w *watch) gather(now time.Time) builder {
	b := builder{now: now}
	if w.g != nil {
		w.collect(&b)
		b.coalesce()
	}
	if w.prev != nil {
		pb := w.prev.gather(now)
		w.carried = freeze(&pb)
		// Its predecessors' calls under way count too: a Guard that served
		// none (a load that failed made it and closed it) settles at once,
		// while the one before it has calls still ending.
		if w.prev.settled() && w.prev.prev == nil {
			w.prev = nil
		}
	}
	w.carried.addTo(&b)
	return b
}

// coalesce folds the points of one series into one: two policies of one
// name in a Guard report the same series twice, which an exporter refuses
// (Prometheus answers the whole scrape with an error). Counts and
// histograms add up; a gauge keeps the outermost policy's point.
func (b *builder) coalesce() {
	for in, d := range instruments {
		b.ints[in] = coalescePoints(b.ints[in], func(p metricdata.DataPoint[int64]) attribute.Set { return p.Attributes },
			func(p, q *metricdata.DataPoint[int64]) {
				if d.kind == kindCounter {
					p.Value += q.Value
				}
			})
		b.floats[in] = coalescePoints(b.floats[in], func(p metricdata.DataPoint[float64]) attribute.Set { return p.Attributes },
			func(_, _ *metricdata.DataPoint[float64]) {}) // ratios are gauges
		b.hists[in] = coalescePoints(b.hists[in], func(p metricdata.HistogramDataPoint[float64]) attribute.Set { return p.Attributes },
			func(p, q *metricdata.HistogramDataPoint[float64]) {
				p.BucketCounts = slices.Clone(p.BucketCounts)
				addHistogram(p, q)
			})
	}
}

// coalescePoints folds each point of ps into the first of its series with
// fold, keeping the order of first points.
func coalescePoints[P any](ps []P, attrs func(P) attribute.Set, fold func(p, q *P)) []P {
	if len(ps) < 2 {
		return ps
	}
	first := make(map[attribute.Distinct]int, len(ps))
	out := ps[:0]
	for _, p := range ps {
		set := attrs(p)
		k := set.Equivalent()
		if i, ok := first[k]; ok {
			fold(&out[i], &p)
			continue
		}
		first[k] = len(out)
		out = append(out, p)
	}
	return out
}
