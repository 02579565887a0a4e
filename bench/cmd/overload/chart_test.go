package main

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// TestChartLegendFits draws every library's line and checks that the image
// is wide enough for the longest label of the legend, which once cut the
// Sentinel row's "(always on)" short.
func TestChartLegendFits(t *testing.T) {
	cfg := config{levels: []float64{1, 2}}
	rep := &report{cfg: cfg, capacity: map[string]float64{"cpu": 400}, shed: map[string]map[string][][]levelStats{"cpu": {}}}
	longest := 0
	for _, lib := range shedLibs {
		rep.shed["cpu"][lib.name] = [][]levelStats{{{goodput: 90}}, {{goodput: 80}}}
		longest = max(longest, len([]rune(legendLabel(lib.label))))
	}
	path := filepath.Join(t.TempDir(), "chart.png")
	if err := rep.chart(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// The legend starts 10 pixels after the panel; its text 26 pixels in,
	// 7 pixels a glyph.
	need := panelW + marginL + 10 + 26 + 7*longest
	if w := img.Bounds().Dx(); w < need {
		t.Errorf("chart is %d pixels wide; its longest legend label needs %d", w, need)
	}
}
