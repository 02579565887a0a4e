package bench

import (
	"testing"
	"time"
)

// alternate runs each of fns batch times in turn, round after round for
// b's loop, so that all of them meet the same spells of a shared machine,
// and returns the time each spent in all.
func alternate(b *testing.B, batch int, fns ...func()) []time.Duration {
	spent := make([]time.Duration, len(fns))
	b.ReportAllocs()
	for b.Loop() {
		for i, fn := range fns {
			start := time.Now()
			for range batch {
				fn()
			}
			spent[i] += time.Since(start)
		}
	}
	return spent
}
