package otelmetrics

import (
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice"
)

// durationBounds are the bucket bounds, in seconds, of sluice.call.duration
// and sluice.wait.duration, from a millisecond to a minute (doc.go lists
// them). A bucket counts the durations above the bound before it, up to
// and including its own, as OpenTelemetry's explicit buckets do.
var durationBounds = func() (s [len(bounds)]float64) {
	for i, b := range bounds {
		s[i] = b.Seconds()
	}
	return s
}()

// bounds are the bounds of a sluice.Histogram, which a call's duration is
// compared with: the Guard's histograms and those of w by resource are
// alike.
var bounds = [len(sluice.Histogram{}.Counts) - 1]time.Duration(sluice.Histogram{}.Bounds())

// histogram counts durations in the buckets of durationBounds, with atomic
// adds a call pays instead of a record into the SDK: a few nanoseconds
// where the SDK's series lookup, lock and bucket search cost hundreds. The
// counts are spread over shards picked by the duration's low bits, which
// vary from call to call like random ones at no cost, so that calls on
// different cores rarely write the same cache line.
type histogram struct {
	shards [histShards]histShard
}

const histShards = 4

// histShard is one shard's buckets and sum, padded to whole cache lines.
type histShard struct {
	counts [len(durationBounds) + 1]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
	_      [64 - (len(durationBounds)+2)*8%64]byte
}

// record counts d.
func (h *histogram) record(d time.Duration) {
	i := 0
	for i < len(bounds) && d > bounds[i] {
		i++
	}
	s := &h.shards[(d^d>>10)&(histShards-1)]
	s.counts[i].Add(1)
	s.sum.Add(int64(d))
}

// point returns h's counts as a cumulative data point since start, and
// false when it has counted nothing.
func (h *histogram) point(attrs attribute.Set, start, now time.Time) (metricdata.HistogramDataPoint[float64], bool) {
	p := metricdata.HistogramDataPoint[float64]{
		Attributes:   attrs,
		StartTime:    start,
		Time:         now,
		Bounds:       append([]float64(nil), durationBounds[:]...),
		BucketCounts: make([]uint64, len(durationBounds)+1),
	}
	var sum time.Duration
	for i := range h.shards {
		s := &h.shards[i]
		for b := range s.counts {
			n := s.counts[b].Load()
			p.BucketCounts[b] += n
			p.Count += n
		}
		sum += time.Duration(s.sum.Load())
	}
	p.Sum = sum.Seconds()
	return p, p.Count > 0
}

// lazyHistogram is a histogram made on its first record, so that the
// series a Guard never sees cost no memory.
type lazyHistogram struct{ p atomic.Pointer[histogram] }

func (l *lazyHistogram) record(d time.Duration) {
	h := l.p.Load()
	if h == nil {
		h = new(histogram)
		if !l.p.CompareAndSwap(nil, h) {
			h = l.p.Load()
		}
	}
	h.record(d)
}

// point is histogram.point, false when nothing was recorded.
func (l *lazyHistogram) point(attrs attribute.Set, start, now time.Time) (metricdata.HistogramDataPoint[float64], bool) {
	if h := l.p.Load(); h != nil {
		return h.point(attrs, start, now)
	}
	return metricdata.HistogramDataPoint[float64]{}, false
}

// guardHistogram adds to b the point of h, one of a Guard's histograms
// (sluice.Stats.Durations), as a point of sluice.call.duration, unless h
// counted nothing.
func (b *builder) guardHistogram(h *sluice.Histogram, attrs attribute.Set, start time.Time) {
	p := metricdata.HistogramDataPoint[float64]{
		Attributes:   attrs,
		StartTime:    start,
		Time:         b.now,
		Bounds:       append([]float64(nil), durationBounds[:]...),
		BucketCounts: append([]uint64(nil), h.Counts[:]...),
		Sum:          h.Sum.Seconds(),
	}
	for _, n := range h.Counts {
		p.Count += n
	}
	if p.Count > 0 {
		b.hists[callDuration] = append(b.hists[callDuration], p)
	}
}
