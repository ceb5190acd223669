package sim

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Series is one line of a plot: a value per simulated second.
type Series struct {
	Label  string
	Color  color.RGBA
	Values []float64
	// Width is the line's width in pixels; 0 means 2. A wide line drawn
	// first still shows under a narrow one with the same values.
	Width int
}

// Plot draws series over time as a PNG: a log-scaled y axis (calls or
// actions a second), the provider's outage shaded, and a legend.
func Plot(w io.Writer, title string, p Provider, series []Series) error {
	const (
		width, height = 1200, 560
		left, right   = 80, 24
		top, bottom   = 48, 56
	)
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	n := 0
	hi := 10.0
	for _, s := range series {
		n = max(n, len(s.Values))
		for _, v := range s.Values {
			hi = max(hi, v)
		}
	}
	if n < 2 {
		return fmt.Errorf("plot: nothing to draw")
	}
	lo := 1.0
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	plotW, plotH := width-left-right, height-top-bottom
	x := func(sec float64) int { return left + int(sec/float64(n-1)*float64(plotW)) }
	y := func(v float64) int {
		v = max(v, lo)
		return top + plotH - int((math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*float64(plotH))
	}
	// The outage (dark) and the brown-out (light).
	shade := func(from, to time.Duration, c color.RGBA) {
		if to <= from {
			return
		}
		r := image.Rect(x(from.Seconds()), top, x(to.Seconds()), top+plotH)
		draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Over)
	}
	shade(p.OutageStart, p.OutageEnd, color.RGBA{255, 205, 205, 255})
	shade(p.OutageEnd, p.BrownoutEnd, color.RGBA{255, 235, 205, 255})
	grey := color.RGBA{200, 200, 200, 255}
	black := color.RGBA{0, 0, 0, 255}
	for v := lo; v <= hi; v *= 10 {
		line(img, left, y(v), left+plotW, y(v), grey)
		label(img, left-8-7*len(short(v)), y(v)+4, short(v), black)
	}
	for sec := 0; sec < n; sec += 60 {
		line(img, x(float64(sec)), top, x(float64(sec)), top+plotH, grey)
		label(img, x(float64(sec))-10, top+plotH+18, fmt.Sprintf("%dm", sec/60), black)
	}
	line(img, left, top, left, top+plotH, black)
	line(img, left, top+plotH, left+plotW, top+plotH, black)
	label(img, left, 24, title, black)
	label(img, left+plotW/2-80, height-14, "simulated time (minutes)", black)
	for i, s := range series {
		width := s.Width
		if width <= 0 {
			width = 2
		}
		for t := 1; t < len(s.Values); t++ {
			for d := range width {
				off := d - (width-1)/2
				line(img, x(float64(t-1)), y(s.Values[t-1])+off, x(float64(t)), y(s.Values[t])+off, s.Color)
			}
		}
		ly := top + 16 + 18*i
		draw.Draw(img, image.Rect(left+plotW-330, ly-8, left+plotW-310, ly-4), image.NewUniform(s.Color), image.Point{}, draw.Src)
		label(img, left+plotW-302, ly, s.Label, black)
	}
	return png.Encode(w, img)
}

// short writes a power of ten as 1, 10, 100, 1k, 10k, ….
func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.0fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// line draws a straight line (Bresenham).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		img.SetRGBA(x0, y0, c)
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
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

// label writes text with its baseline at (x, y).
func label(img *image.RGBA, x, y int, text string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(text)
}
