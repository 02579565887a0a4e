package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = time.Millisecond

func TestGradientUpdate(t *testing.T) {
	e, err := Gradient{InitialLimit: 10, Tolerance: 1.2, ProbeEvery: 5}.newEstimator()
	require.NoError(t, err)
	g := e.(*gradient)
	steps := []struct {
		name  string
		s     windowSample
		limit float64
		base  time.Duration
	}{
		{"first window sets the baseline, grows", windowSample{avg: 10 * ms, maxInflight: 10}, 11, 10 * ms},
		// Second window: within tolerance, 12.1; then the early probe at half.
		{"probe starts", windowSample{avg: 12 * ms, maxInflight: 11}, 7, 10 * ms},
		// The probe's average is the new baseline; the limit resumes from
		// 12.1, judged by the 12 ms it had: 12.1 × 1.2 / (12/9).
		{"probe ends", windowSample{avg: 9 * ms, maxInflight: 7}, 12.1 * 1.2 * 9 / 12, 9 * ms},
		{"app-limited does not grow", windowSample{avg: 9 * ms, maxInflight: 3}, 12.1 * 1.2 * 9 / 12, 9 * ms},
		{"above tolerance shrinks to fit it", windowSample{avg: 20 * ms, maxInflight: 10}, 12.1 * 1.2 * 9 / 12 * 1.2 * 9 / 20, 9 * ms},
		{"a collapse shrinks by half at most", windowSample{avg: 90 * ms, maxInflight: 5}, 12.1 * 1.2 * 9 / 12 * 1.2 * 9 / 20 / 2, 9 * ms},
		{"lower latency lowers the baseline; next probe", windowSample{avg: 8 * ms, maxInflight: 3}, 2, 8 * ms},
	}
	for i, st := range steps {
		got := g.update(st.s)
		assert.InDelta(t, st.limit, got, 1e-9, st.name)
		assert.Equal(t, st.base, g.baseline(), st.name)
		assert.Equal(t, i == 1 || i == 6, g.probing(), st.name)
	}
}

// TestGradientNotBinding: when the limit is not filled, a scheduled probe is
// replaced by taking the window's average as the baseline, and a rise in
// latency brings the limit down to what was in use, not below.
func TestGradientNotBinding(t *testing.T) {
	e, err := Gradient{InitialLimit: 40, ProbeEvery: 5}.newEstimator()
	require.NoError(t, err)
	g := e.(*gradient)
	assert.InDelta(t, 44.0, g.update(windowSample{avg: 10 * ms, maxInflight: 30}), 1e-9)
	// The dependency got slower: 20 ms at 15 in flight, far from binding.
	// Second window: due for a probe, but the limit did not bind.
	assert.InDelta(t, 44.0, g.update(windowSample{avg: 20 * ms, maxInflight: 15}), 1e-9, "re-baselined: no cut, no growth")
	assert.False(t, g.probing())
	assert.Equal(t, 20*ms, g.baseline())
	// Latency rises at 15 in flight: cut by the gradient, then at most to 15.
	assert.InDelta(t, 44*0.55, g.update(windowSample{avg: 40 * ms, maxInflight: 15}), 1e-9)
	assert.InDelta(t, 15.0, g.update(windowSample{avg: 80 * ms, maxInflight: 15}), 1e-9, "not below what was in use")
	// Now binding: a rise cuts below it, by the gradient.
	assert.InDelta(t, 15*1.1/1.5, g.update(windowSample{avg: 30 * ms, maxInflight: 15}), 1e-9)
}

func TestGradientBounds(t *testing.T) {
	e, err := Gradient{InitialLimit: 4, MinLimit: 2, MaxLimit: 5, ProbeEvery: 50}.newEstimator()
	require.NoError(t, err)
	assert.InDelta(t, 4.0, e.initial(), 0)
	assert.InDelta(t, 5.0, e.update(windowSample{avg: ms, maxInflight: 4}), 0)
	assert.InDelta(t, 3.0, e.update(windowSample{avg: ms, maxInflight: 5}), 0, "probe at ceil(5/2)")
	assert.InDelta(t, 5.0, e.update(windowSample{avg: ms, maxInflight: 3}), 0, "resumes at MaxLimit")
	assert.InDelta(t, 2.5, e.update(windowSample{avg: 100 * ms, maxInflight: 5}), 0)
	assert.InDelta(t, 2.0, e.update(windowSample{avg: 100 * ms, maxInflight: 5}), 0, "MinLimit")
}

func TestAIMDUpdate(t *testing.T) {
	e, err := AIMD{InitialLimit: 10, MinLimit: 5}.newEstimator()
	require.NoError(t, err)
	w, n, drop := e.settings()
	assert.Equal(t, 500*ms, w)
	assert.Equal(t, int64(10), n)
	assert.Equal(t, 5*time.Second, drop)
	assert.InDelta(t, 11.0, e.update(windowSample{avg: ms, maxInflight: 5}), 1e-9)
	assert.InDelta(t, 11.0, e.update(windowSample{avg: ms, maxInflight: 5}), 1e-9, "app-limited")
	assert.InDelta(t, 9.9, e.update(windowSample{avg: ms, drops: 1, maxInflight: 11}), 1e-9)
	for range 20 {
		e.update(windowSample{drops: 1})
	}
	assert.InDelta(t, 5.0, e.update(windowSample{drops: 1}), 1e-9, "MinLimit")
}
