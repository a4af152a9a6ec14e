package sweepout

import (
	"fmt"
	"strconv"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/goodput"
	"github.com/rankrun/rankrun/sweep"
)

// Sweep is a finished sweep, as every output renders it.
type Sweep struct {
	Cells []*sweep.Cell
	SLO   goodput.SLO
	GPUs  int    // the GPU budget of a generated grid (--gpus), 0 for a sweep of given pairs
	Title string // the workload and the compute model, for every output (Title)
	Short string // the same in a line a plot can hold
	Cut   string // after an interrupt: which cells the outputs hold ("" when all)
}

// Title names what every cell of the sweep shares: the workload but its
// arrival, the cost model (compute describes a cell's configuration's,
// "" for none), the repeats; short is a shorter form for plots.
func Title(cells []*sweep.Cell, compute func(*executor.Config) string) (title, short string) {
	if len(cells) == 0 {
		return "", ""
	}
	c := &cells[0].Config
	w := c.Workload
	s := fmt.Sprintf("%d requests, %d input tokens", w.Requests, w.InputTokens)
	if w.InputJitter > 0 {
		s += fmt.Sprintf(" (+-%g%%)", 100*w.InputJitter)
	}
	s += fmt.Sprintf(", %d output tokens", w.OutputTokens)
	if t := executor.TraceSummary(c); t != nil {
		s = fmt.Sprintf("%d requests of trace %s, its lengths (input p50 %d p99 %d, output p50 %d p99 %d tokens); a trace's rate is its requests over their replayed span (scale=K multiplies it)",
			w.Requests, t.File, t.InputP50, t.InputP99, t.OutputP50, t.OutputP99)
	}
	short = s
	if pc, ok := c.Compute.(sweep.CostModel); ok {
		short += fmt.Sprintf("; %s on %s", pc.Model.Name, pc.HW.Name)
	}
	if d := compute(c); d != "" {
		s += "; " + d
	}
	if n := len(cells[0].Reports); n > 1 {
		s += fmt.Sprintf("; medians of %d repeats", n)
		short += fmt.Sprintf("; medians of %d repeats", n)
	}
	return s, short
}

func (sw Sweep) repeats() int { return len(sw.Cells[0].Reports) }

// goodputs is every pair's goodput, nil when no cell has a rate.
func (sw Sweep) goodputs() []sweep.PairGoodput {
	for _, r := range sw.Cells {
		if r.Rate > 0 {
			return sweep.Goodputs(sw.Cells, sw.SLO)
		}
	}
	return nil
}

// rates lists the swept rates in order of first appearance.
func (sw Sweep) rates() []string {
	var out []string
	seen := map[float64]bool{}
	for _, r := range sw.Cells {
		if r.Rate > 0 && !seen[r.Rate] {
			seen[r.Rate] = true
			out = append(out, fmtRate(r.Rate))
		}
	}
	return out
}

// fmtRate is a rate as %g wrote it before traces (a rate as the user gave
// it: 2, 0.25, 1e+06, 3.33333333), or to 6 significant digits where it has
// more than 12 characters (a trace's rate, 4.77856).
func fmtRate(r float64) string {
	s := strconv.FormatFloat(r, 'g', -1, 64)
	if len(s) > 12 {
		s = strconv.FormatFloat(r, 'g', 6, 64)
	}
	return s
}
