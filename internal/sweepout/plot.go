package sweepout

import (
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// failedColor marks failed cells in every plot.
var failedColor = color.RGBA{R: 200, A: 255}

// Plot draws the sweep to path, as SVG, or PNG when path ends in .png:
// against the rate when two or more rates were swept (ratePanels), else
// per pair (barPanels). The workload and cost model (Short) are the
// figure's title, whatever the number of arrival patterns.
func (sw Sweep) Plot(path string) error {
	var panels []*plot.Plot
	var err error
	if len(sw.rates()) >= 2 {
		panels, err = sw.ratePanels()
	} else {
		panels, err = sw.barPanels()
	}
	if err != nil {
		return err
	}
	for _, p := range panels {
		p.Y.Tick.Marker = evenTicks{}
		p.Y.Min = 0
	}
	return renderPanels(path, sw.Short, panels)
}

// evenTicks are gonum's default ticks, every label with the same number of
// decimals (0, 0.5, 1 become 0.0, 0.5, 1.0), and no exponent form.
type evenTicks struct{}

func (evenTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	prec := 0
	for _, t := range ticks {
		if t.Label == "" {
			continue
		}
		s := strconv.FormatFloat(t.Value, 'f', -1, 64)
		if i := strings.IndexByte(s, '.'); i >= 0 {
			prec = max(prec, min(len(s)-i-1, 6))
		}
	}
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = strconv.FormatFloat(t.Value, 'f', prec, 64)
		}
	}
	return ticks
}

// barPanels: TTFT p99 and throughput per pair, one bar per arrival pattern
// (in the legend, also when there is one); a failed cell has no bar but a
// "failed" mark.
func (sw Sweep) barPanels() ([]*plot.Plot, error) {
	var pairs, arrs []string
	for _, r := range sw.Cells {
		pairs, arrs = appendNew(pairs, r.Pair.String()), appendNew(arrs, r.Arrival)
	}
	ttft, rps := make([]plotter.Values, len(arrs)), make([]plotter.Values, len(arrs))
	for i := range arrs {
		ttft[i], rps[i] = make(plotter.Values, len(pairs)), make(plotter.Values, len(pairs))
	}
	width := vg.Points(math.Min(24, 120/float64(len(arrs))))
	failedAt := make([][]string, len(pairs)) // the failed arrivals of each pair
	for _, r := range sw.Cells {
		a, p := indexOf(arrs, r.Arrival), indexOf(pairs, r.Pair.String())
		if r.Summary.Failed {
			failedAt[p] = append(failedAt[p], r.Arrival)
			continue
		}
		ttft[a][p], rps[a][p] = zeroNaN(r.Summary.TTFTP99), r.Summary.Tput
	}
	// One mark per pair, naming its failed arrivals when some ran.
	var failed plotter.XYLabels
	for p, fa := range failedAt {
		if len(fa) == 0 {
			continue
		}
		label := "failed"
		if len(fa) < len(arrs) {
			label += ": " + strings.Join(fa, ", ")
		}
		failed.XYs = append(failed.XYs, plotter.XY{X: float64(p), Y: 0})
		failed.Labels = append(failed.Labels, label)
	}
	panel := func(title, ylabel string, vals []plotter.Values) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text, p.Y.Label.Text, p.X.Label.Text = title, ylabel, "layout pair (ctx/gen)"
		top := 0.0
		for i, v := range vals {
			bc, err := plotter.NewBarChart(v, width)
			if err != nil {
				return nil, err
			}
			bc.Color = plotutil.Color(i)
			bc.LineStyle.Width = 0
			bc.Offset = vg.Length(float64(i)-float64(len(vals)-1)/2) * width
			p.Add(bc)
			p.Legend.Add(arrs[i], bc)
			for _, x := range v {
				top = math.Max(top, x)
			}
		}
		if err := addFailedLabels(p, failed); err != nil {
			return nil, err
		}
		// Headroom above the tallest bar for the legend.
		p.Y.Max = math.Max(top*1.3, 1)
		p.Legend.Top, p.Legend.Left, p.Legend.XOffs = true, true, vg.Inch/8
		p.NominalX(pairs...)
		p.X.Min, p.X.Max = -0.6, float64(len(pairs))-0.4
		rotateTicks(p, len(pairs) > 3)
		return p, nil
	}
	left, err := panel("TTFT p99", "ms", ttft)
	if err != nil {
		return nil, err
	}
	right, err := panel("Throughput", "requests/s", rps)
	if err != nil {
		return nil, err
	}
	return []*plot.Plot{left, right}, nil
}

// addFailedLabels writes "failed" where a failed cell's bar or point would
// be.
func addFailedLabels(p *plot.Plot, failed plotter.XYLabels) error {
	if len(failed.XYs) == 0 {
		return nil
	}
	l, err := plotter.NewLabels(failed)
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Color = failedColor
		l.TextStyle[i].XAlign, l.TextStyle[i].YAlign = draw.XCenter, draw.YBottom
	}
	p.Add(l)
	return nil
}

func rotateTicks(p *plot.Plot, on bool) {
	if on {
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	}
}

func appendNew(list []string, s string) []string {
	if indexOf(list, s) < 0 {
		list = append(list, s)
	}
	return list
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// renderPanels lays panels out two per row under a title line and writes
// them as SVG or PNG by path's extension.
func renderPanels(path, title string, panels []*plot.Plot) error {
	cols := min(2, len(panels))
	rows := (len(panels) + cols - 1) / cols
	w, h := 12*vg.Inch, vg.Length(rows)*4.5*vg.Inch+vg.Inch/2
	var canvas vg.CanvasWriterTo
	if strings.ToLower(filepath.Ext(path)) == ".png" {
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	} else {
		canvas = vgsvg.New(w, h)
	}
	dc := draw.New(canvas)
	sty := text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, 12), XAlign: draw.XCenter, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
	dc.FillText(sty, vg.Point{X: w / 2, Y: h - vg.Inch/8}, title)
	body := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{Min: dc.Min, Max: vg.Point{X: dc.Max.X, Y: dc.Max.Y - vg.Inch/2}}}
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
		for j := range cols {
			if k := i*cols + j; k < len(panels) {
				grid[i][j] = panels[k]
			}
		}
	}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Inch / 2, PadY: vg.Inch / 4, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8,
		PadLeft: vg.Inch / 8, PadRight: vg.Inch / 4}
	cells := plot.Align(grid, tiles, body)
	for i := range grid {
		for j, p := range grid[i] {
			if p != nil {
				p.Draw(cells[i][j])
			}
		}
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(out); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
