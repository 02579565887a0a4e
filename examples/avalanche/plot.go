package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"sort"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// series is one line of a panel: a value per second of the run.
type series struct {
	label string
	col   color.RGBA
	dash  bool
	ys    []float64 // NaN where there is no value
}

// perSecondP99 returns, for each second of the run, the p99 latency in
// milliseconds of the route's requests sent in that second.
func perSecondP99(samples []sample, route int, seconds int) []float64 {
	buckets := make([][]time.Duration, seconds)
	for _, s := range samples {
		i := int(s.at / time.Second)
		if s.route == route && i >= 0 && i < seconds {
			buckets[i] = append(buckets[i], s.latency)
		}
	}
	ys := make([]float64, seconds)
	for i, b := range buckets {
		if len(b) == 0 {
			ys[i] = math.NaN()
			continue
		}
		sort.Slice(b, func(x, y int) bool { return b[x] < b[y] })
		ys[i] = float64(percentile(b, 0.99)) / float64(time.Millisecond)
	}
	return ys
}

// perSecondGoroutines returns the peak goroutine count in each second.
func perSecondGoroutines(gauges []gauge, seconds int) []float64 {
	ys := make([]float64, seconds)
	for i := range ys {
		ys[i] = math.NaN()
	}
	for _, g := range gauges {
		i := int(g.at / time.Second)
		if i >= 0 && i < seconds && (math.IsNaN(ys[i]) || float64(g.goroutines) > ys[i]) {
			ys[i] = float64(g.goroutines)
		}
	}
	return ys
}

var (
	red    = color.RGBA{200, 40, 40, 255}
	blue   = color.RGBA{30, 90, 200, 255}
	grey   = color.RGBA{120, 120, 120, 255}
	light  = color.RGBA{230, 230, 230, 255}
	shade  = color.RGBA{255, 236, 220, 255}
	black  = color.RGBA{20, 20, 20, 255}
	white  = color.RGBA{255, 255, 255, 255}
	width  = 1100
	height = 760
)

// writePlot draws two panels over the run's seconds, the sick phase shaded:
// per-second p99 latency of each route (log scale), and the process's peak
// goroutines, for both runs.
func writePlot(path string, cfg Config, unguardedRun, guardedRun *runResult) error {
	seconds := int(cfg.total() / time.Second)
	if seconds < 1 {
		seconds = 1
	}
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)

	lat := []series{
		{"unguarded, healthy route", red, false, perSecondP99(unguardedRun.samples, 0, seconds)},
		{"unguarded, sick route", red, true, perSecondP99(unguardedRun.samples, 1, seconds)},
		{"sluice, healthy route", blue, false, perSecondP99(guardedRun.samples, 0, seconds)},
		{"sluice, sick route", blue, true, perSecondP99(guardedRun.samples, 1, seconds)},
	}
	gor := []series{
		{"unguarded", red, false, perSecondGoroutines(unguardedRun.gauges, seconds)},
		{"sluice", blue, false, perSecondGoroutines(guardedRun.gauges, seconds)},
	}
	sickFrom, sickTo := cfg.Calm.Seconds(), (cfg.Calm + cfg.Sick).Seconds()
	top := image.Rect(80, 60, width-30, 400)
	bottom := image.Rect(80, 470, width-30, height-50)
	label(img, 80, 20, black, fmt.Sprintf("sluice avalanche: %d req/s offered; the dependency is sick from %gs to %gs (shaded)", cfg.Rate, sickFrom, sickTo))
	panel(img, top, "p99 latency per second (ms, log scale)", lat, seconds, sickFrom, sickTo, true)
	panel(img, bottom, "peak goroutines per second", gor, seconds, sickFrom, sickTo, false)

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

func panel(img *image.RGBA, r image.Rectangle, title string, ss []series, seconds int, sickFrom, sickTo float64, logScale bool) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, y := range s.ys {
			if !math.IsNaN(y) {
				lo, hi = math.Min(lo, y), math.Max(hi, y)
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0, 1
	}
	if logScale {
		lo = math.Pow(10, math.Floor(math.Log10(math.Max(lo, 0.1))))
		hi = math.Pow(10, math.Ceil(math.Log10(math.Max(hi, lo*10))))
	} else {
		lo, hi = 0, niceCeil(hi*1.1)
	}
	ymap := func(v float64) int {
		f := (v - lo) / (hi - lo)
		if logScale {
			f = (math.Log10(math.Max(v, lo)) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo))
		}
		return r.Max.Y - int(f*float64(r.Dy()))
	}
	xmap := func(sec float64) int { return r.Min.X + int(sec/float64(seconds)*float64(r.Dx())) }

	draw.Draw(img, image.Rect(xmap(sickFrom), r.Min.Y, xmap(sickTo), r.Max.Y), &image.Uniform{shade}, image.Point{}, draw.Src)
	// Grid and ticks.
	if logScale {
		for v := lo; v <= hi*1.0001; v *= 10 {
			y := ymap(v)
			hline(img, r.Min.X, r.Max.X, y, light)
			label(img, r.Min.X-70, y+4, grey, fmt.Sprintf("%8g", v))
		}
	} else {
		for i := 0; i <= 4; i++ {
			v := lo + (hi-lo)*float64(i)/4
			y := ymap(v)
			hline(img, r.Min.X, r.Max.X, y, light)
			label(img, r.Min.X-70, y+4, grey, fmt.Sprintf("%8.0f", v))
		}
	}
	step := max(1, seconds/12)
	for s := 0; s <= seconds; s += step {
		x := xmap(float64(s))
		vline(img, x, r.Max.Y, r.Max.Y+5, grey)
		label(img, x-8, r.Max.Y+18, grey, fmt.Sprintf("%ds", s))
	}
	rect(img, r, grey)
	label(img, r.Min.X, r.Min.Y-8, black, title)

	for _, s := range ss {
		prevX, prevY, have := 0, 0, false
		for i, y := range s.ys {
			if math.IsNaN(y) {
				have = false
				continue
			}
			x, yy := xmap(float64(i)+0.5), ymap(y)
			if have {
				line(img, prevX, prevY, x, yy, s.col, s.dash)
			}
			prevX, prevY, have = x, yy, true
		}
	}
	// Legend, top right inside the panel.
	lx, ly := r.Max.X-230, r.Min.Y+18
	for _, s := range ss {
		line(img, lx, ly-4, lx+30, ly-4, s.col, s.dash)
		label(img, lx+38, ly, black, s.label)
		ly += 16
	}
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func label(img *image.RGBA, x, y int, c color.RGBA, s string) {
	d := font.Drawer{Dst: img, Src: &image.Uniform{c}, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

func rect(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	hline(img, r.Min.X, r.Max.X, r.Min.Y, c)
	hline(img, r.Min.X, r.Max.X, r.Max.Y, c)
	vline(img, r.Min.X, r.Min.Y, r.Max.Y, c)
	vline(img, r.Max.X, r.Min.Y, r.Max.Y, c)
}

// line draws a 2-pixel line from (x0,y0) to (x1,y1), dashed if asked.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, dash bool) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for n := 0; ; n++ {
		if !dash || (n/6)%2 == 0 {
			img.SetRGBA(x0, y0, c)
			img.SetRGBA(x0, y0+1, c)
			img.SetRGBA(x0+1, y0, c)
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

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
