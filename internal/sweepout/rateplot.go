package sweepout

import (
	"math"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/rankrun/rankrun/sweep"
)

// ratePairs is how many pairs the rate plot draws lines for (the best by
// goodput per GPU).
const ratePairs = 6

// ratePanels: TTFT p99, TPOT p50 and throughput per GPU against the rate,
// one line per pair for the best pairs, failed cells as red crosses; and
// the goodput per GPU of the best pairs as bars.
func (sw Sweep) ratePanels() ([]*plot.Plot, error) {
	best := sweep.Ranked(sw.goodputs())
	if len(best) > ratePairs {
		best = best[:ratePairs]
	}
	type series struct{ ttft, tpot, tput, failed plotter.XYs }
	lines := make([]series, len(best))
	for _, r := range sw.Cells {
		i := -1
		for k, g := range best {
			if g.Pair == r.Pair.String() {
				i = k
			}
		}
		if i < 0 || r.Rate <= 0 {
			continue
		}
		s := &lines[i]
		if r.Summary.Failed {
			s.failed = append(s.failed, plotter.XY{X: r.Rate, Y: 0})
			continue
		}
		s.ttft = append(s.ttft, plotter.XY{X: r.Rate, Y: zeroNaN(r.Summary.TTFTP99)})
		s.tpot = append(s.tpot, plotter.XY{X: r.Rate, Y: zeroNaN(r.Summary.TPOTP50)})
		s.tput = append(s.tput, plotter.XY{X: r.Rate, Y: r.Summary.TputPerGPU})
	}
	panel := func(title, ylabel string, pick func(series) plotter.XYs, withFailed bool) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text, p.Y.Label.Text, p.X.Label.Text = title, ylabel, "arrival rate (requests/s)"
		p.X.Tick.Marker = sw.rateTicks()
		top := 0.0
		for i, s := range lines {
			xy := pick(s)
			sort.Slice(xy, func(a, b int) bool { return xy[a].X < xy[b].X })
			l, pts, err := plotter.NewLinePoints(xy)
			if err != nil {
				return nil, err
			}
			l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
			pts.Shape = plotutil.Shape(i)
			p.Add(l, pts)
			p.Legend.Add(best[i].Pair, l, pts)
			for _, v := range xy {
				top = math.Max(top, v.Y)
			}
			if withFailed && len(s.failed) > 0 {
				x, err := plotter.NewScatter(s.failed)
				if err != nil {
					return nil, err
				}
				x.Shape, x.Color, x.Radius = draw.CrossGlyph{}, failedColor, vg.Points(5)
				p.Add(x)
				p.Legend.Add(best[i].Pair+" failed", x)
			}
		}
		// Headroom above the lines for the legend.
		p.Y.Max = math.Max(top*(1.2+0.12*float64(len(lines))), 1e-3)
		p.Legend.Top, p.Legend.Left, p.Legend.XOffs = true, true, vg.Inch/8
		return p, nil
	}
	var panels []*plot.Plot
	for _, pn := range []struct {
		title, unit string
		pick        func(series) plotter.XYs
	}{
		{"TTFT p99", "ms", func(s series) plotter.XYs { return s.ttft }},
		{"TPOT p50", "ms", func(s series) plotter.XYs { return s.tpot }},
		{"Throughput per GPU", "requests/s per GPU", func(s series) plotter.XYs { return s.tput }},
	} {
		p, err := panel(pn.title, pn.unit, pn.pick, true)
		if err != nil {
			return nil, err
		}
		panels = append(panels, p)
	}
	g, err := sw.goodputBars()
	if err != nil {
		return nil, err
	}
	return append(panels, g), nil
}

// goodputBars is the goodput per GPU of the best pairs (at most 12), best
// first.
func (sw Sweep) goodputBars() (*plot.Plot, error) {
	best := sweep.Ranked(sw.goodputs())
	if len(best) > 12 {
		best = best[:12]
	}
	vals := make(plotter.Values, len(best))
	names := make([]string, len(best))
	top := 0.0
	for i, g := range best {
		vals[i], names[i] = g.PerGPU, g.Pair
		top = math.Max(top, g.PerGPU)
	}
	p := plot.New()
	p.Title.Text = "Goodput per GPU (" + sw.SLO.String() + ")"
	p.Y.Label.Text = "requests/s per GPU"
	bc, err := plotter.NewBarChart(vals, vg.Points(18))
	if err != nil {
		return nil, err
	}
	bc.Color, bc.LineStyle.Width = plotutil.Color(0), 0
	p.Add(bc)
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	p.Y.Max = math.Max(top*1.2, 1e-3)
	rotateTicks(p, true)
	return p, nil
}

// rateTicks marks the swept rates on the X axis, each label with the same
// decimals.
func (sw Sweep) rateTicks() plot.ConstantTicks {
	var ticks plot.ConstantTicks
	prec := 0
	for _, r := range sw.rates() {
		if i := strings.IndexByte(r, '.'); i >= 0 {
			prec = max(prec, len(r)-i-1)
		}
	}
	for _, r := range sw.rates() {
		v, _ := strconv.ParseFloat(r, 64)
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64)})
	}
	return ticks
}
