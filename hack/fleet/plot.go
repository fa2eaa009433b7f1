package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// plotBucket is the width of the plotted averages.
const plotBucket = 10 * time.Second

// palette holds one distinct, legible colour per configuration.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
	{0x17, 0xbe, 0xcf, 0xff}, // cyan
}

// writePlot draws the fleet's reviews/s (TokenReviews and SARs) over time,
// one line per configuration, and writes it as a PNG to path.
func writePlot(path string, p params, results []*result) error {
	const (
		width, height = 1180, 560
		left, right   = 80, 250 // the legend is in the right margin
		top, bottom   = 40, 60
	)
	img, text := newCanvas(width, height)

	var series [][]float64
	ymax := 0.0
	for _, r := range results {
		s := r.series(plotBucket)
		series = append(series, s)
		for _, v := range s {
			ymax = math.Max(ymax, v)
		}
	}
	ymax, ystep := niceScale(ymax)
	xmax := p.Duration.Minutes()
	x0, y0, x1, y1 := left, height-bottom, width-right, top
	px := func(min float64) int { return x0 + int(math.Round(min/xmax*float64(x1-x0))) }
	py := func(v float64) int { return y0 - int(math.Round(v/ymax*float64(y0-y1))) }

	grid := color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
	ink := color.RGBA{0x30, 0x30, 0x30, 0xff}
	for v := 0.0; v <= ymax+ystep/2; v += ystep {
		y := py(v)
		line(img, x0, y, x1, y, grid, 1)
		l := formatCount(v)
		text(x0-8-textWidth(l), y+4, l, ink)
	}
	xstep := niceStep(xmax / 8)
	for m := 0.0; m <= xmax+xstep/2; m += xstep {
		x := px(m)
		line(img, x, y0, x, y1, grid, 1)
		l := fmt.Sprintf("%g", m)
		text(x-textWidth(l)/2, y0+16, l, ink)
	}
	line(img, x0, y0, x1, y0, ink, 1)
	line(img, x0, y0, x0, y1, ink, 1)
	if p.RestartAt > 0 {
		x := px(p.RestartAt.Minutes())
		for y := y1; y < y0; y += 8 {
			line(img, x, y, x, min(y+4, y0), ink, 1)
		}
		text(x+4, y1+12, "all agents restart", ink)
	}
	title := fmt.Sprintf("API server load of %d nodes x %d callers (TokenReviews + SARs per second, %v averages)", p.Nodes, p.Callers, plotBucket)
	text((width-textWidth(title))/2, 22, title, ink)
	xl := "simulated minutes"
	text((x0+x1-textWidth(xl))/2, height-22, xl, ink)
	text(8, y1-12, "reviews/s", ink)

	for i, s := range series {
		st := styleOf(i)
		var step int
		for j := 1; j < len(s); j++ {
			t0 := float64(j-1) * plotBucket.Minutes()
			t1 := float64(j) * plotBucket.Minutes()
			dashedLine(img, px(t0), py(s[j-1]), px(t1), py(s[j]), st, &step)
		}
	}
	// Legend, in the right margin.
	lx, ly := x1+20, y1+12
	for i, r := range results {
		y := ly + i*18
		var step int
		dashedLine(img, lx, y-4, lx+28, y-4, styleOf(i), &step)
		text(lx+36, y, r.config.name, ink)
	}

	return writePNG(path, img)
}

// style is how a series is drawn.
type style struct {
	c     color.Color
	thick int
	dash  int // pixels on, then off; 0: solid
}

// newCanvas returns a white image of width × height and a function that
// writes text on it at (x, y) (the baseline) in basicfont's 7×13 face, the
// one both plots use.
func newCanvas(width, height int) (*image.RGBA, func(x, y int, s string, c color.Color)) {
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	return img, func(x, y int, s string, c color.Color) {
		d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
		d.DrawString(s)
	}
}

// writePNG writes img to path as a PNG.
func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// textWidth is the width in pixels of s in the plots' face.
func textWidth(s string) int { return font.MeasureString(basicfont.Face7x13, s).Round() }

// styleOf returns series i's style: colours from the palette, and dashes
// from the sixth series on, so that a series drawn over another with the
// same values (reviewauth-2m-5m over kubelet) leaves it visible.
func styleOf(i int) style {
	st := style{c: palette[i%len(palette)], thick: 2}
	if i >= 5 {
		st.dash = 6
	}
	return st
}

// dashedLine draws a line in style st; step carries the dash pattern from
// one segment to the next.
func dashedLine(img *image.RGBA, x0, y0, x1, y1 int, st style, step *int) {
	lineFunc(x0, y0, x1, y1, func(x, y int) {
		*step++
		if st.dash > 0 && (*step/st.dash)%2 == 1 {
			return
		}
		for i := 0; i < st.thick; i++ {
			for j := 0; j < st.thick; j++ {
				img.Set(x+i-st.thick/2, y+j-st.thick/2, st.c)
			}
		}
	})
}

// line draws a line of the given thickness.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, thick int) {
	var step int
	dashedLine(img, x0, y0, x1, y1, style{c: c, thick: thick}, &step)
}

// lineFunc calls plot for each point of a line (Bresenham).
func lineFunc(x0, y0, x1, y1 int, plot func(x, y int)) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	err := dx + dy
	for {
		plot(x0, y0)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * err
		if e2 >= dy {
			err += dy
			x0 += sx
		}
		if e2 <= dx {
			err += dx
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
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

// niceStep returns a 1, 2 or 5 times a power of ten at least x.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// niceScale returns an axis maximum at least max and its tick step.
func niceScale(max float64) (top, step float64) {
	if max <= 0 {
		return 1, 0.2
	}
	step = niceStep(max / 6)
	return math.Ceil(max/step) * step, step
}

// formatCount formats an axis value: 1500 as 1.5k.
func formatCount(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%gk", v/1000)
	}
	return fmt.Sprintf("%g", v)
}
