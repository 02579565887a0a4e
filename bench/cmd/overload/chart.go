package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The chart: goodput (% of capacity) against load level, a panel per surge
// scenario, a line per library.

var palette = []color.RGBA{
	{90, 90, 90, 255},   // unguarded
	{200, 30, 30, 255},  // sluice guard
	{240, 120, 20, 255}, // sluice concurrency
	{30, 100, 200, 255},
	{40, 160, 60, 255},
	{140, 60, 180, 255},
	{0, 170, 170, 255},
	{170, 140, 0, 255},
}

const (
	panelW, panelH = 420, 320
	marginL        = 50
	marginT        = 40
	marginB        = 40
	yMax           = 120.0
)

func (rep *report) chart(path string) error {
	var scenarios []string
	for _, sc := range []string{"cpu", "pool"} {
		if rep.shed[sc] != nil {
			scenarios = append(scenarios, sc)
		}
	}
	if len(scenarios) == 0 {
		return nil
	}
	// The legend is as wide as its longest label, in basicfont's 7-pixel
	// glyphs, after its 26-pixel swatch.
	legendW := 0
	for _, lib := range shedLibs {
		if rep.hasLib(lib.name) {
			legendW = max(legendW, 10+26+7*len([]rune(legendLabel(lib.label)))+10)
		}
	}
	w := len(scenarios)*(panelW+marginL) + legendW
	h := marginT + panelH + marginB
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	levels := rep.cfg.levels
	for pi, sc := range scenarios {
		x0 := pi*(panelW+marginL) + marginL
		y0 := marginT
		title := strings.SplitN(scenarioTitle[sc], ":", 2)[0]
		text(img, x0, y0-22, fmt.Sprintf("%s, capacity %.0f/s: goodput %% of capacity", title, rep.capacity[sc]), color.Black)
		grey := color.RGBA{210, 210, 210, 255}
		for v := 0.0; v <= yMax; v += 20 {
			y := y0 + panelH - int(v/yMax*panelH)
			line(img, x0, y, x0+panelW, y, grey, 1)
			text(img, x0-30, y+4, fmt.Sprintf("%3.0f", v), color.Black)
		}
		line(img, x0, y0, x0, y0+panelH, color.Black, 1)
		line(img, x0, y0+panelH, x0+panelW, y0+panelH, color.Black, 1)
		xAt := func(li int) int {
			if len(levels) == 1 {
				return x0 + panelW/2
			}
			return x0 + 20 + li*(panelW-40)/(len(levels)-1)
		}
		for li, l := range levels {
			text(img, xAt(li)-10, y0+panelH+18, strings.ReplaceAll(levelName(l), "×", "x"), color.Black)
		}
		for ci, lib := range shedLibs {
			per, ok := rep.shed[sc][lib.name]
			if !ok {
				continue
			}
			c := palette[ci%len(palette)]
			px, py := -1, -1
			for li := range levels {
				g := min(medians(per[li]).goodput, yMax)
				x, y := xAt(li), y0+panelH-int(g/yMax*panelH)
				dot(img, x, y, c, 3)
				if px >= 0 {
					line(img, px, py, x, y, c, 2)
				}
				px, py = x, y
			}
		}
	}
	lx := len(scenarios)*(panelW+marginL) + 10
	ly := marginT
	for ci, lib := range shedLibs {
		if !rep.hasLib(lib.name) {
			continue
		}
		c := palette[ci%len(palette)]
		line(img, lx, ly, lx+20, ly, c, 3)
		text(img, lx+26, ly+4, legendLabel(lib.label), color.Black)
		ly += 18
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// legendLabel is a library's label as the legend shows it, without the
// Markdown code marks of the table.
func legendLabel(label string) string { return strings.ReplaceAll(label, "`", "") }

func (rep *report) hasLib(name string) bool {
	for _, libs := range rep.shed {
		if _, ok := libs[name]; ok {
			return true
		}
	}
	return false
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func dot(img *image.RGBA, x, y int, c color.Color, r int) {
	for dy := -r; dy <= r; dy++ {
		for dx := -r; dx <= r; dx++ {
			if dx*dx+dy*dy <= r*r {
				img.Set(x+dx, y+dy, c)
			}
		}
	}
}

// line draws from (x0, y0) to (x1, y1), width pixels wide.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, width int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		for i := range width {
			for j := range width {
				img.Set(x0+i-width/2, y0+j-width/2, c)
			}
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}
