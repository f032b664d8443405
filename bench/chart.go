package bench

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"sort"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The chart: two panels side by side, log-scaled N on both x axes. Left, the per-change
// latency (median, with a bar from min to max) of each kind; right, the cold start time with
// the line cold(first N) x N / first N for comparison (linear scaling).

var (
	white  = color.RGBA{255, 255, 255, 255}
	black  = color.RGBA{20, 20, 20, 255}
	grid   = color.RGBA{225, 225, 225, 255}
	grey   = color.RGBA{130, 130, 130, 255}
	colors = []color.RGBA{
		{31, 119, 180, 255},  // blue
		{214, 39, 40, 255},   // red
		{44, 160, 44, 255},   // green
		{148, 103, 189, 255}, // purple
		{255, 127, 14, 255},  // orange
		{23, 190, 207, 255},  // cyan
	}
)

// series is one line of a panel: points (x, y) with optional error bars [lo, hi].
type series struct {
	label  string
	color  color.RGBA
	x, y   []float64
	lo, hi []float64
	dashed bool
}

type panel struct {
	title, subtitle, xLabel string
	logY                    bool
	series                  []series
}

const (
	chartW, chartH = 1400, 760
	textScale      = 2
)

// WriteChart renders the per-change latency and cold start panels of results as PNG.
func WriteChart(w io.Writer, results []*Result) error {
	rs := append([]*Result(nil), results...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].N < rs[j].N })
	img := image.NewRGBA(image.Rect(0, 0, chartW, chartH))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)

	var lat panel
	lat.title = "One change: API call to the kernel"
	lat.subtitle = "milliseconds, median and min-max"
	lat.xLabel = "Services (x10 endpoints)"
	for ci, kind := range []string{KindEndpointAdd, KindEndpointRemove, KindServiceAdd, KindServiceDelete, KindNoop} {
		s := series{label: kind, color: colors[ci%len(colors)]}
		for _, r := range rs {
			sum := Summarize(r.Latencies(kind))
			if sum.N == 0 {
				continue
			}
			s.x = append(s.x, float64(r.N))
			s.y = append(s.y, 1000*sum.Median)
			s.lo = append(s.lo, 1000*sum.Min)
			s.hi = append(s.hi, 1000*sum.Max)
		}
		lat.series = append(lat.series, s)
	}
	var cold panel
	cold.title = "Cold start: to the kernel fully programmed"
	cold.subtitle = "seconds, log scale"
	cold.xLabel, cold.logY = "Services (x10 endpoints)", true
	cs := series{label: "cold start", color: colors[0]}
	lin := series{label: "linear in N", color: grey, dashed: true}
	for _, r := range rs {
		if r.ColdStart.Seconds <= 0 {
			continue
		}
		cs.x = append(cs.x, float64(r.N))
		cs.y = append(cs.y, r.ColdStart.Seconds)
	}
	if len(cs.x) > 0 {
		for _, x := range cs.x {
			lin.x = append(lin.x, x)
			lin.y = append(lin.y, cs.y[0]*x/cs.x[0])
		}
	}
	cold.series = []series{cs, lin}

	drawPanel(img, image.Rect(0, 0, chartW/2, chartH), lat)
	drawPanel(img, image.Rect(chartW/2, 0, chartW, chartH), cold)
	return png.Encode(w, img)
}

func drawPanel(img *image.RGBA, area image.Rectangle, p panel) {
	plot := image.Rect(area.Min.X+110, area.Min.Y+100, area.Max.X-30, area.Max.Y-190)
	drawText(img, area.Min.X+20, area.Min.Y+16, p.title, black)
	drawText(img, area.Min.X+20, area.Min.Y+50, p.subtitle, grey)

	xs, ys := []float64{}, []float64{}
	for _, s := range p.series {
		xs = append(xs, s.x...)
		ys = append(ys, s.y...)
		ys = append(ys, s.hi...)
		ys = append(ys, s.lo...)
	}
	if len(xs) == 0 {
		return
	}
	xMin, xMax := minMax(xs)
	xMin, xMax = xMin/1.5, xMax*1.5
	yMin, yMax := minMax(ys)
	if p.logY {
		yMin, yMax = math.Pow(10, math.Floor(math.Log10(yMin))), math.Pow(10, math.Ceil(math.Log10(yMax)))
	} else {
		yMin, yMax = 0, niceCeil(yMax*1.1)
	}
	px := func(x float64) int {
		return plot.Min.X + int(float64(plot.Dx())*(math.Log10(x)-math.Log10(xMin))/(math.Log10(xMax)-math.Log10(xMin)))
	}
	py := func(y float64) int {
		var f float64
		if p.logY {
			f = (math.Log10(math.Max(y, yMin)) - math.Log10(yMin)) / (math.Log10(yMax) - math.Log10(yMin))
		} else {
			f = (y - yMin) / (yMax - yMin)
		}
		return plot.Max.Y - int(float64(plot.Dy())*f)
	}

	// Grid and ticks.
	for _, t := range yTicks(yMin, yMax, p.logY) {
		y := py(t)
		hline(img, plot.Min.X, plot.Max.X, y, grid)
		label := formatTick(t)
		drawText(img, plot.Min.X-10-textWidth(label), y-textHeight()/2, label, black)
	}
	seen := map[float64]bool{}
	for _, x := range xs {
		if seen[x] {
			continue
		}
		seen[x] = true
		X := px(x)
		vline(img, X, plot.Min.Y, plot.Max.Y, grid)
		label := formatN(x)
		drawText(img, X-textWidth(label)/2, plot.Max.Y+10, label, black)
	}
	rect(img, plot, black)
	drawText(img, plot.Min.X+plot.Dx()/2-textWidth(p.xLabel)/2, plot.Max.Y+45, p.xLabel, black)

	// Series.
	for _, s := range p.series {
		for i := range s.x {
			X, Y := px(s.x[i]), py(s.y[i])
			if i > 0 {
				line(img, px(s.x[i-1]), py(s.y[i-1]), X, Y, s.color, 3, s.dashed)
			}
			if i < len(s.lo) {
				line(img, X, py(s.lo[i]), X, py(s.hi[i]), s.color, 1, false)
				hline(img, X-6, X+6, py(s.lo[i]), s.color)
				hline(img, X-6, X+6, py(s.hi[i]), s.color)
			}
			if !s.dashed {
				square(img, X, Y, 5, s.color)
			}
		}
	}
	// Legend, below the axis label.
	lx, ly := plot.Min.X, plot.Max.Y+80
	for _, s := range p.series {
		w := 40 + textWidth(s.label) + 30
		if lx+w > area.Max.X-10 {
			lx, ly = plot.Min.X, ly+textHeight()+8
		}
		line(img, lx, ly+textHeight()/2, lx+30, ly+textHeight()/2, s.color, 3, s.dashed)
		drawText(img, lx+38, ly, s.label, black)
		lx += w
	}
}

func minMax(v []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		if math.IsNaN(x) || x <= 0 {
			continue
		}
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	if math.IsInf(lo, 1) {
		return 1, 10
	}
	if lo == hi {
		hi = lo * 2
	}
	return lo, hi
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func yTicks(lo, hi float64, logY bool) []float64 {
	var out []float64
	if logY {
		for v := lo; v <= hi*1.0001; v *= 10 {
			out = append(out, v)
		}
		return out
	}
	step := niceCeil((hi - lo) / 6)
	for v := lo; v <= hi*1.0001; v += step {
		out = append(out, v)
	}
	return out
}

func formatTick(v float64) string {
	switch {
	case v >= 1000 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

func formatN(v float64) string {
	if v >= 1000 && math.Mod(v, 1000) == 0 {
		return fmt.Sprintf("%.0fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

func set(img *image.RGBA, x, y int, c color.RGBA) {
	if image.Pt(x, y).In(img.Bounds()) {
		img.SetRGBA(x, y, c)
	}
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := min(x0, x1); x <= max(x0, x1); x++ {
		set(img, x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := min(y0, y1); y <= max(y0, y1); y++ {
		set(img, x, y, c)
	}
}

func rect(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	hline(img, r.Min.X, r.Max.X, r.Min.Y, c)
	hline(img, r.Min.X, r.Max.X, r.Max.Y, c)
	vline(img, r.Min.X, r.Min.Y, r.Max.Y, c)
	vline(img, r.Max.X, r.Min.Y, r.Max.Y, c)
}

func square(img *image.RGBA, x, y, r int, c color.RGBA) {
	for dy := -r; dy <= r; dy++ {
		for dx := -r; dx <= r; dx++ {
			set(img, x+dx, y+dy, c)
		}
	}
}

// line draws a line of the given width; dashed ones in 10-pixel dashes.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, width int, dashed bool) {
	dx, dy := float64(x1-x0), float64(y1-y0)
	n := int(math.Max(math.Abs(dx), math.Abs(dy)))
	if n == 0 {
		n = 1
	}
	for i := 0; i <= n; i++ {
		if dashed && (i/10)%2 == 1 {
			continue
		}
		x := x0 + int(math.Round(dx*float64(i)/float64(n)))
		y := y0 + int(math.Round(dy*float64(i)/float64(n)))
		for w := -(width / 2); w <= width/2; w++ {
			if math.Abs(dx) >= math.Abs(dy) {
				set(img, x, y+w, c)
			} else {
				set(img, x+w, y, c)
			}
		}
	}
}

func textWidth(s string) int { return len(s) * basicfont.Face7x13.Advance * textScale }
func textHeight() int        { return basicfont.Face7x13.Height * textScale }

// drawText draws s with its top-left corner at (x, y), the 7x13 font scaled up.
func drawText(img *image.RGBA, x, y int, s string, c color.RGBA) {
	face := basicfont.Face7x13
	small := image.NewAlpha(image.Rect(0, 0, len(s)*face.Advance, face.Height))
	d := font.Drawer{Dst: small, Src: image.Opaque, Face: face, Dot: fixed.P(0, face.Ascent)}
	d.DrawString(s)
	b := small.Bounds()
	for sy := b.Min.Y; sy < b.Max.Y; sy++ {
		for sx := b.Min.X; sx < b.Max.X; sx++ {
			if small.AlphaAt(sx, sy).A < 128 {
				continue
			}
			for ky := range textScale {
				for kx := range textScale {
					set(img, x+sx*textScale+kx, y+sy*textScale+ky, c)
				}
			}
		}
	}
}
